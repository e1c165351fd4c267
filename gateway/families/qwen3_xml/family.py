"""The qwen3_xml family: ChatML prompts, `<think>` reasoning and Qwen3-Coder's XML tool calls."""

from __future__ import annotations

from functools import cached_property

from gateway.families.base import OutputParser
from gateway.families.chatml import ChatMLFamily
from gateway.families.templates import choose_template, render_request
from gateway.types import ChatRequest

from .grammar import CALLS
from .parser import Qwen3XmlParser
from .prompt import BUILTIN_TEMPLATE


class Qwen3XmlFamily(ChatMLFamily):
    """Qwen3-Coder, Qwen3.5 and later: `<tool_call><function=NAME><parameter=K>V</parameter>…` calls."""

    name = "qwen3_xml"
    calls = CALLS

    @cached_property
    def template(self) -> str:
        return choose_template(self.context, BUILTIN_TEMPLATE)

    def render(self, request: ChatRequest) -> str:
        return render_request(self.template, request, self.context.special_tokens_map)

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        """The parser of the gateway's output, which follows this family's grammar whenever tools are active (the
        plan always carries it: a grammar that cannot be enforced is a 400, never dropped), so calls come only from
        the `<tool_call>` token and a `<function=…>` spelled in free text is content (no `bare_calls`)."""
        return Qwen3XmlParser(
            request.active_tools,
            tool_calls=bool(request.active_tools),
            in_reasoning=self.opens_reasoning(request, prompt),
        )


FAMILIES = (Qwen3XmlFamily,)
