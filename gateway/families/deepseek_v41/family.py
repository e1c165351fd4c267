"""The deepseek_v41 family: native DSML prompts, `<think>` reasoning and DSML tool calls.

Options (model entry `options`): `thinking` (bool, default false) — whether a
request that says nothing about thinking gets a reasoning prompt.
"""

from __future__ import annotations

from backends.base import Grammar
from gateway.families.base import Family, OutputParser
from gateway.types import ChatRequest

from .grammar import build_grammar
from .markers import EOS, GROUNDING
from .modes import effort_budget, thinking_enabled
from .parser import DsmlParser
from .prompt import prompt_ends_in_reasoning, render_prompt


class DeepSeekV41Family(Family):
    """DeepSeek V4.1 (DSML tool calls; `<think>` reasoning)."""

    name = "deepseek_v41"
    keep_in_assistant = GROUNDING

    def render(self, request: ChatRequest) -> str:
        return render_prompt(request, self._thinking(request), effort_budget(request))

    def stop_token_ids(self) -> list[int]:
        eos = self.context.tokenizer.token_to_id(EOS)
        return sorted({*self.context.eos_token_ids, *([eos] if eos is not None else [])})

    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        return build_grammar(request, self._in_reasoning(request))

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        return DsmlParser(self._in_reasoning(request))

    def _thinking(self, request: ChatRequest) -> bool:
        return thinking_enabled(request, bool(self.context.options.get("thinking", False)))

    def _in_reasoning(self, request: ChatRequest) -> bool:
        return prompt_ends_in_reasoning(request, self._thinking(request))
