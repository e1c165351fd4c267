"""What the ChatML families (hermes, qwen3_xml) share: a `Family` base that stops at `<|im_end|>`, keeps the
`<think>` and `<tool_call>` added tokens (`chatml_tokens.py`) in assistant history and sees a reopened think block."""

from __future__ import annotations

from functools import cached_property
from typing import ClassVar

from backends.base import Grammar
from gateway.families.base import Family, reopened_reasoning
from gateway.families.chatml_tokens import THINK_END, THINK_START, TOKEN_MARKERS, TURN_END, TURN_START
from gateway.grammars.markers import MarkerTokens
from gateway.grammars.tool_calls import CallFormat, build_grammar, unconstrained
from gateway.types import ChatRequest


def prompt_opens_reasoning(prompt: str) -> bool:
    """Whether the prompt's last turn opened a `<think>` block that the model is to continue."""
    return reopened_reasoning(prompt, TURN_START, THINK_START, THINK_END)


class ChatMLFamily(Family):
    """A family with ChatML turns and `<think>` / `<tool_call>` added tokens; `calls` says how it writes calls."""

    keep_in_assistant = TOKEN_MARKERS
    calls: ClassVar[CallFormat]

    @cached_property
    def marker_tokens(self) -> MarkerTokens:
        """The ids of the markers this vocabulary has as added tokens (the grammar's markers)."""
        return MarkerTokens.of(self.context.tokenizer, TOKEN_MARKERS)

    @cached_property
    def marker_spellings(self) -> frozenset[str]:
        """The markers that are added tokens in this vocabulary, by spelling."""
        return frozenset(self.marker_tokens.ids)

    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        if unconstrained(request):
            return None  # without the prompt's scan for an open think block
        return build_grammar(
            request, self.opens_reasoning(request, prompt), self.calls, self.marker_tokens, self.stop_ids
        )

    def stop_token_ids(self) -> list[int]:
        return self.stop_ids_of(TURN_END)

    @staticmethod
    def opens_reasoning(request: ChatRequest, prompt: str) -> bool:
        """Whether the generation prompt ends inside `<think>` (e.g. a thinking model's)."""
        return request.add_generation_prompt and prompt_opens_reasoning(prompt)
