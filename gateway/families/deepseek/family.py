"""The DeepSeek families, one per version of the output format.

* `deepseek_v41`, `deepseek_v4`, `deepseek_v32`: native prompts (the models ship
  Python encoders, not Jinja templates), `<think>` reasoning and DSML calls in
  the version's tag words. Option `thinking` (bool, default false): whether a
  request that says nothing about thinking gets a reasoning prompt.
* `deepseek_v3`, `deepseek_v31`: the checkpoint's own chat template and
  tool-call-token sections (`gateway.families.templated`).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar

from backends.base import Grammar
from gateway.families.base import Family, OutputParser
from gateway.families.section_grammar import CallLayout
from gateway.families.templated import TemplatedSectionFamily
from gateway.families.token_sections import CallSplitter
from gateway.families.values import tool_schemas
from gateway.types import ChatRequest

from .grammar import DsmlVocabulary, build_grammar, raw_lengths_held
from .markers import EOS, GROUNDING, SECTIONS, THINK_END, THINK_START, V4, V32, V41, Dialect
from .modes import effort_budget, thinking_enabled
from .parser import DsmlParser, split_v3_call, split_v31_call
from .prompt import V4_STYLE, V41_STYLE, Style, prompt_ends_in_reasoning, render_prompt
from .prompt_v32 import render_prompt_v32


class DeepSeekV41Family(Family):
    """DeepSeek V4.1 (DSML tool calls `<｜DSML｜ calls>`; `<think>` reasoning)."""

    name = "deepseek_v41"
    keep_in_assistant = GROUNDING
    dialect: ClassVar[Dialect] = V41
    style: ClassVar[Style] = V41_STYLE

    def render(self, request: ChatRequest) -> str:
        return render_prompt(request, self._thinking(request), effort_budget(request), self.style)

    def stop_token_ids(self) -> list[int]:
        return self.stop_ids_of(EOS)

    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        return build_grammar(request, self._in_reasoning(request), self.dialect, self.dsml_vocabulary)

    def raw_lengths_held(self, parameters: Any) -> frozenset[str]:
        return raw_lengths_held(parameters)

    @cached_property
    def dsml_vocabulary(self) -> DsmlVocabulary:
        """The served vocabulary's DSML and think tokens (tags then take the token, never its spelling)."""
        return DsmlVocabulary.of(self.context.tokenizer)

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        return DsmlParser(
            self._in_reasoning(request),
            forced_calls=request.calls_forced,
            dialect=self.dialect,
            schemas=tool_schemas(request.active_tools),
        )

    def _thinking(self, request: ChatRequest) -> bool:
        return thinking_enabled(request, bool(self.context.options.get("thinking", False)))

    def _in_reasoning(self, request: ChatRequest) -> bool:
        return prompt_ends_in_reasoning(request, self._thinking(request))


class DeepSeekV4Family(DeepSeekV41Family):
    """DeepSeek V4 (DSML `<｜DSML｜tool_calls>`, no space after the marker)."""

    name = "deepseek_v4"
    dialect = V4
    style = V4_STYLE


class DeepSeekV32Family(DeepSeekV41Family):
    """DeepSeek V3.2 (DSML `<｜DSML｜function_calls>`)."""

    name = "deepseek_v32"
    dialect = V32

    def render(self, request: ChatRequest) -> str:
        return render_prompt_v32(request, self._thinking(request))


class DeepSeekV3Family(TemplatedSectionFamily):
    """DeepSeek V3 / R1: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` and ```json-fenced arguments."""

    name = "deepseek_v3"
    keep_in_assistant = frozenset({THINK_START, THINK_END})
    """R1's and V3.1's templates cut an assistant turn's reasoning at its `</think>`: left a token, the template sees
    it and the history is what vLLM renders (the ChatML and GLM families keep theirs so too)."""
    markers = SECTIONS
    stop_tokens = (EOS,)

    def call_splitter(self, request: ChatRequest) -> CallSplitter:
        return split_v3_call

    def call_layout(self) -> CallLayout:
        return CallLayout(header="function", before="{name}\n```json\n", after="\n```")


class DeepSeekV31Family(DeepSeekV3Family):
    """DeepSeek V3.1: `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>` and bare JSON arguments."""

    name = "deepseek_v31"

    def call_splitter(self, request: ChatRequest) -> CallSplitter:
        return split_v31_call

    def call_layout(self) -> CallLayout:
        return CallLayout(header="{name}")


FAMILIES = (DeepSeekV3Family, DeepSeekV31Family, DeepSeekV32Family, DeepSeekV4Family, DeepSeekV41Family)
