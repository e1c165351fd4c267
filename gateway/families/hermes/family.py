"""The hermes family: ChatML with `<tool_call>` JSON calls (Qwen2.5 / Qwen3 / Hermes models)."""

from __future__ import annotations

from functools import cached_property

from backends.base import Grammar
from gateway.families.base import Family, OutputParser
from gateway.families.recognition import Recognition
from gateway.types import ChatRequest

from .grammar import build_grammar
from .markers import (
    THINK_END,
    THINK_START,
    TOOL_CALL_END,
    TOOL_CALL_START,
    TURN_END,
    TURN_START,
    prompt_opens_reasoning,
)
from .parser import HermesParser
from .prompt import choose_template, default_system_message, render_prompt


class HermesFamily(Family):
    """ChatML prompts, `<think>` reasoning and `<tool_call>{"name", "arguments"}</tool_call>` calls."""

    name = "hermes"
    keep_in_assistant = frozenset({THINK_START, THINK_END, TOOL_CALL_START, TOOL_CALL_END})
    recognition = (
        Recognition(tokens=frozenset({TURN_START, TURN_END})),  # ChatML (the embedded SmolLM2)
        Recognition(tokens=frozenset({TURN_START, TURN_END, TOOL_CALL_START, TOOL_CALL_END})),  # Qwen2.5 / Qwen3
    )

    @cached_property
    def template(self) -> str:
        """The template in use (see `prompt.choose_template`)."""
        return choose_template(self.context)

    @cached_property
    def default_system_message(self) -> str | None:
        return default_system_message(self.template, self.context.chat_template)

    def render(self, request: ChatRequest) -> str:
        return render_prompt(request, self.template, self.context, self.default_system_message)

    def stop_token_ids(self) -> list[int]:
        return self.stop_ids_of(TURN_END)

    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        return build_grammar(request, self._opens_reasoning(request, prompt))

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        return HermesParser(tool_calls=bool(request.active_tools), in_reasoning=self._opens_reasoning(request, prompt))

    @staticmethod
    def _opens_reasoning(request: ChatRequest, prompt: str) -> bool:
        """Whether the prompt ends inside `<think>` (e.g. a thinking model's generation prompt)."""
        return request.add_generation_prompt and prompt_opens_reasoning(prompt)
