"""Incremental parser of Harmony output: analysis → reasoning, commentary/final → content, calls → tool_calls.

Decisions (the gateway's documented behaviour):
* Structure is read from token ids only: `<|start|>`, `<|channel|>`,
  `<|constrain|>`, `<|message|>` and the terminators `<|end|>`, `<|call|>`,
  `<|return|>` count when they arrive as control tokens (a Piece with
  `token_id`); text that merely spells them is text. Inside a message's body
  only a terminator ends it: any other control token there (`<|start|>`
  too) is its spelling, as openai-harmony's parser, vLLM's, reads it.
* The prompt ends in a header (`<|start|>assistant`), so the output starts
  in one. A header is held until its `<|message|>` (at most MAX_HEADER
  characters; a longer one is malformed). Its recipient (`to=NAME`, in the
  role part or after the channel, as the Harmony spec allows) and its
  channel decide what the body is: `to=functions.NAME` → a call on any
  channel; another recipient (a built-in tool such as `python`) → dropped;
  `analysis` → reasoning; `commentary` (preambles) and `final` → content;
  any other channel → dropped. `to=assistant` is no recipient.
* Reasoning and content stream as they arrive. A call is emitted whole
  (index by emission order, id, name, the model's JSON text) once its
  arguments object closes: a call cut short (max_tokens) was never finished
  and is never sent. Arguments that are not a JSON object drop the call.
* A header that never gets its `<|message|>` (malformed, or cut short) is
  dropped; the next `<|start|>` or terminator begins a fresh one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from enum import Enum, auto

from gateway.families.calls import CallParser, JsonEnd, json_object
from gateway.ids import new_call_id
from gateway.types import Delta

from .markers import (
    ANALYSIS,
    CHANNEL,
    COMMENTARY,
    CONSTRAIN,
    CONTROL_TOKENS,
    FINAL,
    FUNCTIONS,
    MESSAGE,
    START,
    TERMINATORS,
)

MAX_HEADER = 1024
"""Characters a header may hold before it is malformed (tool names and channels are short)."""
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_CONTROL = frozenset(CONTROL_TOKENS)
_HEADER_CONTROL = re.compile(f"({re.escape(CHANNEL)}|{re.escape(CONSTRAIN)})")


HeaderPart = str | tuple[str]
"""Header text, or a control token as a 1-tuple (so text that spells one is never taken for it)."""


class Body(Enum):
    REASONING = auto()
    CONTENT = auto()
    CALL = auto()
    DROP = auto()


_REASONING, _CONTENT, _CALL, _DROP = Body.REASONING, Body.CONTENT, Body.CALL, Body.DROP
"""The bodies as module names, read per token: in Python 3.11 `Enum` class attributes go through its metaclass's
`__getattr__` hook (~500 instructions a read; a module name ~10)."""


def read_header(parts: Sequence[HeaderPart]) -> tuple[Body, str | None]:
    """What a message with this header holds, and the function name of a call.

    `parts` are the header's text and, as 1-tuples, its control tokens `<|channel|>` / `<|constrain|>`, in order.
    """
    channel: str | None = None
    recipient: str | None = None
    after_channel = False
    for part in parts:
        if isinstance(part, tuple):
            after_channel = part == (CHANNEL,)
            continue
        for found in _RECIPIENT.findall(part):
            recipient = None if found == "assistant" else found
        if after_channel:
            words = part.split()
            channel = words[0] if words and not words[0].startswith("to=") else channel
            after_channel = False
    if recipient is not None:
        if recipient.startswith(FUNCTIONS) and len(recipient) > len(FUNCTIONS):
            return _CALL, recipient[len(FUNCTIONS) :]
        return _DROP, None
    if channel == ANALYSIS:
        return _REASONING, None
    if channel in (COMMENTARY, FINAL):
        return _CONTENT, None
    return _DROP, None


class HarmonyParser(CallParser):
    """Token-aware Harmony output parser for one choice; the same deltas however the output is chunked."""

    controls = _CONTROL

    def __init__(self, new_id: Callable[[], str] = new_call_id):
        super().__init__(new_id)
        self._header: list[HeaderPart] | None = []
        self._header_size = 0
        self._body: Body | None = None
        self._name: str | None = None
        self._arguments: list[str] = []
        self._json_end = JsonEnd()

    @classmethod
    def after(cls, prompt: str) -> HarmonyParser:
        """A parser for output that continues `prompt`: in the header its last `<|start|>` opened, or in the body
        of that message when the prompt already wrote its `<|message|>` (a continued final message)."""
        parser = cls()
        tail = prompt[prompt.rfind(START) + len(START) :] if START in prompt else ""
        header, opened, _ = tail.partition(MESSAGE)
        parser._header = [p if i % 2 == 0 else (p,) for i, p in enumerate(_HEADER_CONTROL.split(header)) if p]
        if opened:
            parser._open_body()
        return parser

    def _end(self) -> None:
        self._header = None
        self._body = None

    def _control(self, token: str) -> None:
        if token in TERMINATORS or (token == START and self._body is None):
            self._body = None  # a message ends (a call whose JSON never closed is dropped), or a header restarts
            self._header, self._header_size = [], 0
        elif self._body is not None:
            self._text(token)  # inside a message every other control token is its spelling, as openai-harmony reads it
        elif self._header is not None:
            if token == MESSAGE:
                self._open_body()
            else:
                self._header.append((token,))

    def _text(self, text: str) -> None:
        body = self._body
        if body is None:
            header = self._header
            if header is not None:
                if header and isinstance(header[-1], str):
                    header[-1] += text  # one text part between control tokens (bounded by MAX_HEADER)
                else:
                    header.append(text)
                self._header_size += len(text)
                if self._header_size > MAX_HEADER:
                    self._header = None
        elif body is _REASONING:
            self._out.append(Delta("", text))
        elif body is _CONTENT:
            self._out.append(Delta(text))
        elif body is _CALL:
            self._argument_text(text)

    def _open_body(self) -> None:
        assert self._header is not None
        self._body, self._name = read_header(self._header)
        self._header = None
        self._arguments = []
        self._json_end = JsonEnd()

    def _argument_text(self, text: str) -> None:
        end = self._json_end.feed(text)
        if end is None:
            self._arguments.append(text)
            return
        self._arguments.append(text[:end])
        self._close_call()

    def _close_call(self) -> None:
        value = json_object("".join(self._arguments))
        self._body = _DROP
        if self._name is not None and value is not None:
            self._emit_call(self._name, json.dumps(value, ensure_ascii=False))
