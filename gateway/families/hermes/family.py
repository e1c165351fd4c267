"""The hermes family: ChatML with `<tool_call>` JSON calls (Qwen2.5 / Qwen3 / Hermes models)."""

from __future__ import annotations

from functools import cached_property

from gateway.families.base import OutputParser
from gateway.families.chatml import ChatMLFamily
from gateway.families.templates import choose_template
from gateway.types import ChatRequest

from .grammar import CALLS
from .parser import HermesParser
from .prompt import BUILTIN_TEMPLATE, default_system_message, render_prompt


class HermesFamily(ChatMLFamily):
    """ChatML prompts, `<think>` reasoning and `<tool_call>{"name", "arguments"}</tool_call>` calls."""

    name = "hermes"
    calls = CALLS

    @cached_property
    def template(self) -> str:
        """The template in use (`templates.choose_template`: ours where the checkpoint's has no tools)."""
        return choose_template(self.context, BUILTIN_TEMPLATE)

    @cached_property
    def default_system_message(self) -> str | None:
        return default_system_message(self.template, self.context)

    def render(self, request: ChatRequest) -> str:
        return render_prompt(request, self.template, self.context, self.default_system_message)

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        return HermesParser(
            tool_calls=bool(request.active_tools),
            in_reasoning=self.opens_reasoning(request, prompt),
            forced_calls=request.calls_forced,
            continues=request.continue_final_message,
            token_markers=self.marker_spellings,
        )


FAMILIES = (HermesFamily,)
