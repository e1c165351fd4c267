"""The Kimi families: `kimi_k3` (K3's XTML prompts, control-token channels and tool calls) and `kimi_k2`
(K2 / K2-Instruct / K2.6: the checkpoint's chat template, `<think>` reasoning and tool-call sections)."""

from __future__ import annotations

from functools import cached_property, partial
from typing import Any

from backends.base import Grammar
from gateway.families.base import Family, OutputParser
from gateway.families.section_grammar import CallLayout
from gateway.families.templated import TemplatedSectionFamily
from gateway.families.token_sections import CallSplitter
from gateway.families.values import tool_schemas
from gateway.types import ChatRequest

from .grammar import ControlIds, build_grammar, keeps_raw_lengths
from .markers import END_OF_MSG, IM_END, K2_SECTIONS
from .parser import K2SectionParser, KimiK3Parser, split_k2_call
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
        return self.stop_ids_of(END_OF_MSG)

    def keeps_strict(self, parameters: Any) -> bool:
        return keeps_raw_lengths(parameters)

    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        always_strict = bool(self.context.options.get("strict_tools", False))
        return build_grammar(request, open_channel(request), self.control_ids, always_strict)

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        return KimiK3Parser(channel=open_channel(request))


class KimiK2Family(TemplatedSectionFamily):
    """Kimi K2 / K2-Instruct / K2.6: `<|tool_calls_section_begin|>` sections, the call id naming the tool."""

    name = "kimi_k2"
    markers = K2_SECTIONS
    stop_tokens = (IM_END,)

    def call_splitter(self, request: ChatRequest) -> CallSplitter:
        return partial(split_k2_call, schemas=tool_schemas(request.active_tools))

    def call_layout(self) -> CallLayout:
        return CallLayout(header="functions.{name}:", index=True)

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        earlier = sum(len(m.get("tool_calls") or ()) for m in request.messages)
        return K2SectionParser(self.markers, self.call_splitter(request), self.in_reasoning(prompt), earlier)


FAMILIES = (KimiK2Family, KimiK3Family)
