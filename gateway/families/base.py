"""The interface behind which everything a model family knows lives.

A family owns: how a chat request becomes prompt text (template or native
encoder), which tokens stop generation, which added tokens a client may keep
in assistant history, the grammar that constrains output, and the parser that
turns output back into OpenAI content / reasoning / tool-call deltas.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any, ClassVar

from backends.base import Grammar
from gateway.types import ChatRequest, Delta, Piece


class ParserState(Enum):
    """Base of a parser's state enum: members hash by identity (each is a singleton, equal only to itself), so the
    per-event lookup of a state's step in a dict runs no Python code (Enum's own `__hash__` hashes the name)."""

    __hash__ = object.__hash__


class OutputParser(ABC):
    """Incremental parser of one choice's output. Same answer however the output is chunked."""

    @abstractmethod
    def feed(self, pieces: Sequence[Piece]) -> list[Delta]:
        """Consume the next pieces; return the deltas that are now certain."""

    @abstractmethod
    def finish(self) -> list[Delta]:
        """The output has ended: flush whatever was held back."""

    @property
    @abstractmethod
    def saw_tool_call(self) -> bool:
        """Whether any tool call was emitted (finish_reason becomes "tool_calls")."""


def reopened_reasoning(prompt: str, turn_start: str, think_start: str, think_end: str) -> bool:
    """Whether the prompt's last turn (from its last `turn_start`) opened a think block, not closed since, that the
    model is to continue."""
    start = prompt.rfind(think_start)
    return start > prompt.rfind(turn_start) and prompt.rfind(think_end) < start


@dataclass
class FamilyContext:
    """What a family gets from the model it serves."""

    tokenizer: Any  # tokenizers.Tokenizer
    chat_template: str | None
    bos_token: str | None
    eos_token: str | None
    eos_token_ids: list[int]
    control_token_ids: list[int]
    options: dict[str, Any] = field(default_factory=dict)
    special_tokens: dict[str, str] = field(default_factory=dict)
    """The tokenizer's other named special tokens (unk_token, pad_token, a model's own such as image_token)."""

    @cached_property
    def special_tokens_map(self) -> dict[str, str]:
        """Every named special token, as transformers gives a chat template (its `special_tokens_map`); built once
        (every render reads it; a context is not changed once made, `dataclasses.replace` makes another)."""
        named = {"bos_token": self.bos_token, "eos_token": self.eos_token}
        return {**self.special_tokens, **{name: text for name, text in named.items() if text is not None}}


class Family(ABC):
    """One model family: prompt rendering, stop tokens, grammar and output parsing."""

    name: ClassVar[str]
    keep_in_assistant: ClassVar[frozenset[str]] = frozenset()
    """Added-token spellings that stay tokens in an assistant's content and reasoning."""

    def __init__(self, context: FamilyContext):
        self.context = context

    @abstractmethod
    def render(self, request: ChatRequest) -> str:
        """The prompt text; control tokens the family writes appear spelled out exactly."""

    @abstractmethod
    def stop_token_ids(self) -> list[int]:
        """Token ids that end an assistant turn."""

    @cached_property
    def stop_ids(self) -> tuple[int, ...]:
        """`stop_token_ids()` looked up once (not per request): where the backend stops, where a grammar may end."""
        return tuple(self.stop_token_ids())

    def stop_ids_of(self, *spellings: str) -> list[int]:
        """The ids of `spellings` this vocabulary has, then the checkpoint's eos ids, each once (a family's
        `stop_token_ids` in one line)."""
        tokenizer = self.context.tokenizer
        ids = [tokenizer.token_to_id(spelling) for spelling in spellings] + list(self.context.eos_token_ids)
        return list(dict.fromkeys(i for i in ids if i is not None))

    @abstractmethod
    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        """The output constraint for this request's tools / response_format, or None.

        `prompt` is the rendered prompt (what `render` gave, client text spelled back), so a
        family can see what its generation prompt already opened (a think block, a channel).
        """

    def keeps_strict(self, parameters: Any) -> bool:
        """Whether this family's grammar may hold a tool whose schema is `parameters` to strict: False where it
        surely leaves a keyword out, so a tool that omits `strict` is built best effort at once (no strict build
        that refuses it first, planning.chat_grammar). True where unsure: the strict build then decides."""
        return True

    def raw_lengths_held(self, parameters: Any) -> frozenset[str]:
        """The places in a tool's `parameters` (`.properties.x`) where this family's grammar holds a `minLength` /
        `maxLength` beside a `pattern` itself, a strict build refusing what it cannot hold exactly; elsewhere
        grammars/unenforced.py refuses such a length under strict. None by default."""
        return frozenset()

    @abstractmethod
    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        """A fresh incremental parser for one choice of this request; `prompt` as for `grammar`."""
