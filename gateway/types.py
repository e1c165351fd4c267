"""The core types every stage passes along: a chat request, output pieces, parsed deltas, choice steps.

`Piece` is defined beside the detokenizer in backends/ (the bundled worker shares it) and is re-exported here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from backends.base import TokenLogprob
from backends.detokenizer import Piece

__all__ = ["ChatRequest", "ChoiceStep", "Delta", "Events", "FinishReason", "Piece", "UndeclaredParameters"]

FinishReason = Literal["stop", "length"]


class UndeclaredParameters(dict):
    """The parameters validation fills in for a tool that declared none: a plain empty object schema to every stage,
    told apart only where a prompt writes such a tool otherwise (gpt-oss: `() => any`, as openai-harmony does)."""


@dataclass
class ChatRequest:
    """A validated chat request, normalized so that families need not re-check it.

    messages: each a dict with "role" and, where present, "content" (str, text
    parts already joined; or None), "reasoning_content" (str), "name",
    "tool_call_id", "tool_calls" ([{"id", "type": "function", "function":
    {"name", "arguments": dict}}], arguments parsed from their JSON string).
    tools: [{"type": "function", "function": {"name", "description"?,
    "parameters" (dict; UndeclaredParameters {"type": "object", "properties": {}} where the tool sent none),
    "strict"?}}].
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
    add_special_tokens: bool = False
    """The tokenizer's special tokens (its post-processor's) around the rendered prompt's ids, as vLLM adds them."""
    strict_by_default: bool = False
    """A tool that omits `strict` is strict where its schema can be, else best effort (the Responses API's
    default: grammars/unenforced.py::strict_where_possible); otherwise it is best effort."""

    @property
    def active_tools(self) -> list[dict[str, Any]]:
        """Tools the model may call: none when tool_choice is "none", the named one when named."""
        if self.tool_choice == "none":
            return []
        if isinstance(self.tool_choice, dict):
            name = self.tool_choice["function"]["name"]
            return [t for t in self.tools if t["function"]["name"] == name]
        return self.tools

    @property
    def calls_forced(self) -> bool:
        """The answer must be tool calls: tools are active and tool_choice is "required" or names one."""
        return bool(self.active_tools) and self.tool_choice != "auto"


@dataclass
class Delta:
    """One OpenAI delta: content, reasoning, or a fragment of tool call `tool_index`."""

    # Per-token paths build it positionally (`Delta(text)`, `Delta("", text)`, `Delta("", "", index, None, None,
    # fragment)`): keywords make each call build a dict, ~1 K instructions a delta (bench/RESULTS.md, delta17).

    content: str = ""
    reasoning: str = ""
    tool_index: int | None = None
    tool_id: str | None = None
    tool_name: str | None = None
    tool_arguments: str = ""


@dataclass
class ChoiceStep:
    """What one backend chunk added to a choice; `finish_reason` is set on its last step."""

    pieces: list[Piece]
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    completion_tokens: int = 0
    """Output tokens so far (the backend's, a stop token included)."""
    cached_tokens: int = 0
    stop_string: str | None = None
    """The client's stop string that ended the choice, if one did."""
    stop_token: int | None = None
    """The stop token that ended the choice, unless it is the model's EOS token (vLLM's `stop_reason` so)."""

    @property
    def stop_reason(self) -> str | int | None:
        """vLLM's `stop_reason`: the stop string or stop token id that ended the choice; None for EOS and length."""
        return self.stop_string if self.stop_string is not None else self.stop_token


Events = AsyncIterator[tuple[int, ChoiceStep]]
"""A request's choice steps as they come, each tagged with its choice's index."""
