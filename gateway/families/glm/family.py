"""The glm families: GLM-4.5 / 4.6 (newline layout) and GLM-4.7 / 5.x (compact), one format in two variants."""

from __future__ import annotations

from functools import cached_property
from typing import ClassVar

from backends.base import Grammar
from gateway.families.base import Family, OutputParser
from gateway.families.templates import choose_template, render_request
from gateway.grammars.markers import MarkerTokens
from gateway.grammars.tool_calls import build_grammar, unconstrained
from gateway.types import ChatRequest

from .grammar import CALLS
from .markers import (
    ARG_KEY_END,
    ARG_KEY_START,
    ARG_VALUE_END,
    ARG_VALUE_START,
    END_OF_TEXT,
    OBSERVATION,
    THINK_END,
    THINK_START,
    TOKEN_MARKERS,
    TOOL_CALL_END,
    TOOL_CALL_START,
    USER,
    prompt_opens_reasoning,
)
from .parser import GlmParser
from .prompt import BUILTIN_TEMPLATE


class Glm45Family(Family):
    """GLM-4.5 / 4.6: `<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n…</tool_call>`."""

    name = "glm45"
    compact: ClassVar[bool] = False
    keep_in_assistant = frozenset(
        {THINK_START, THINK_END, TOOL_CALL_START, TOOL_CALL_END, ARG_KEY_START, ARG_KEY_END, ARG_VALUE_START,
         ARG_VALUE_END}
    )  # fmt: skip

    @cached_property
    def template(self) -> str:
        return choose_template(self.context, BUILTIN_TEMPLATE)

    def render(self, request: ChatRequest) -> str:
        return render_request(self.template, request, self.context.special_tokens_map, compact=self.compact)

    def stop_token_ids(self) -> list[int]:
        return self.stop_ids_of(END_OF_TEXT, USER, OBSERVATION)

    @cached_property
    def marker_tokens(self) -> MarkerTokens:
        """The ids of the markers this vocabulary has as added tokens (the grammar's markers)."""
        return MarkerTokens.of(self.context.tokenizer, TOKEN_MARKERS)

    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        if unconstrained(request):
            return None  # without the prompt's scan for an open think block
        return build_grammar(request, self._opens_reasoning(request, prompt), CALLS, self.marker_tokens, self.stop_ids)

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        tools = request.active_tools
        return GlmParser(tools, tool_calls=bool(tools), in_reasoning=self._opens_reasoning(request, prompt))

    @staticmethod
    def _opens_reasoning(request: ChatRequest, prompt: str) -> bool:
        return request.add_generation_prompt and prompt_opens_reasoning(prompt)


class Glm47Family(Glm45Family):
    """GLM-4.7 and 5.x: the same calls without newlines; the generation prompt opens `<think>`."""

    name = "glm47"
    compact = True


FAMILIES = (Glm45Family, Glm47Family)
