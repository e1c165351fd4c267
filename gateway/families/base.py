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
from typing import Any, ClassVar

from backends.base import Grammar


@dataclass
class ChatRequest:
    """A validated chat request, normalized so that families need not re-check it.

    messages: each a dict with "role" and, where present, "content" (str, text
    parts already joined; or None), "reasoning_content" (str), "name",
    "tool_call_id", "tool_calls" ([{"id", "type": "function", "function":
    {"name", "arguments": dict}}], arguments parsed from their JSON string).
    tools: [{"type": "function", "function": {"name", "description"?,
    "parameters" (dict, default {"type": "object", "properties": {}}), "strict"?}}].
    tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name": N}}.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    response_format: dict[str, Any] | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    reasoning_effort: str | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False

    @property
    def active_tools(self) -> list[dict[str, Any]]:
        """Tools the model may call: none when tool_choice is "none", the named one when named."""
        if self.tool_choice == "none":
            return []
        if isinstance(self.tool_choice, dict):
            name = self.tool_choice["function"]["name"]
            return [t for t in self.tools if t["function"]["name"] == name]
        return self.tools


@dataclass(frozen=True)
class Piece:
    """A run of detokenized output text; `token_id` is set when the piece is one added/control token."""

    text: str
    token_id: int | None = None


@dataclass
class Delta:
    """One OpenAI delta: content, reasoning, or a fragment of tool call `tool_index`."""

    content: str = ""
    reasoning: str = ""
    tool_index: int | None = None
    tool_id: str | None = None
    tool_name: str | None = None
    tool_arguments: str = ""


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

    @abstractmethod
    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        """The output constraint for this request's tools / response_format, or None.

        `prompt` is the rendered prompt (what `render` gave, client text spelled back), so a
        family can see what its generation prompt already opened (a think block, a channel).
        """

    @abstractmethod
    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        """A fresh incremental parser for one choice of this request; `prompt` as for `grammar`."""
