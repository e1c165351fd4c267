"""The kimi_k3 family: Kimi K3's XTML prompts, control-token channels and tool calls."""

from __future__ import annotations

from functools import cached_property

from backends.base import Grammar
from gateway.families.base import Family, OutputParser
from gateway.types import ChatRequest

from .grammar import ControlIds, build_grammar
from .markers import END_OF_MSG
from .parser import KimiK3Parser
from .prompt import open_channel, render_prompt


class KimiK3Family(Family):
    """XTML messages; `think` → reasoning, `response` → content, `tools` → calls; stop at `<|end_of_msg|>`.

    Option `strict_tools: true` (model config `options`): enforce declared argument schemas even for
    tools that say `strict: false`.
    """

    name = "kimi_k3"

    @cached_property
    def control_ids(self) -> ControlIds:
        return ControlIds.of(self.context.tokenizer)

    def render(self, request: ChatRequest) -> str:
        return render_prompt(request)

    def stop_token_ids(self) -> list[int]:
        end = self.context.tokenizer.token_to_id(END_OF_MSG)
        ids = ([end] if end is not None else []) + list(self.context.eos_token_ids)
        return list(dict.fromkeys(ids))

    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        always_strict = bool(self.context.options.get("strict_tools", False))
        return build_grammar(request, open_channel(request), self.control_ids, always_strict)

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        return KimiK3Parser(channel=open_channel(request))
