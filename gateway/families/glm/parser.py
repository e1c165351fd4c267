"""Incremental, token-aware parser of GLM output: `<think>` reasoning, content and XML-ish tool calls.

`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>`, every tag one added token
(a Piece with `token_id`); GLM-4.5 puts newlines between the parts, GLM-4.7 and 5.x do not (whitespace
outside keys and values is skipped, so one parser reads both). A tag spelled with ordinary tokens is text.

Decisions:
* Reasoning runs to `</think>` (from the output's `<think>`, or from the start when the prompt opened it);
  output cut inside reasoning stays reasoning.
* A value is raw text up to `</arg_value>`, whitespace kept; tag tokens inside it are its text, except a
  `</tool_call>` token that ends the output or is followed by another call (a missing `</arg_value>`).
  Values are typed by the tool's schema; a plain string parameter streams as a JSON string.
* A call is held back until its first argument (or `</tool_call>`) is complete, then sent with the arguments
  so far and streamed; a call cut off before that is no call.
* Content and reasoning lose leading and trailing whitespace.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from enum import Enum, auto
from typing import Any

from gateway.families.base import OutputParser
from gateway.families.streams import Trimmed, json_fragment, new_call_id
from gateway.families.values import convert, is_plain_string, schema_types
from gateway.types import Delta, Piece

from .markers import (
    ARG_KEY_END,
    ARG_KEY_START,
    ARG_VALUE_END,
    ARG_VALUE_START,
    THINK_END,
    THINK_START,
    TOKEN_MARKERS,
    TOOL_CALL_END,
    TOOL_CALL_START,
)


class _State(Enum):
    START = auto()
    REASONING = auto()
    CONTENT = auto()
    NAME = auto()  # after <tool_call>
    KEY = auto()  # after <arg_key>
    BETWEEN = auto()  # inside a call, between its parts
    VALUE = auto()  # after <arg_value>
    VALUE_OR_END = auto()  # a </tool_call> token inside a value: the call's end, or value text


class GlmParser(OutputParser):
    """Streams reasoning, content and tool calls out of GLM output."""

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, tool_calls: bool = True, in_reasoning: bool = False
    ) -> None:
        """`tools`: the request's tools (parameter schemas type the values); `in_reasoning`: the prompt opened it."""
        self._schemas = {
            fn["name"]: (fn.get("parameters") or {}).get("properties") or {}
            for fn in (t.get("function", t) for t in tools)
            if isinstance(fn, Mapping) and isinstance(fn.get("name"), str)
        }
        self._parse_calls = tool_calls
        self._state = _State.REASONING if in_reasoning else _State.START
        self._reasoning = Trimmed()
        self._content = Trimmed()
        self._out: list[Delta] = []
        self._calls = 0
        self._held: list[Delta] | None = None
        self._sent = False
        self._name = ""
        self._call_open = False
        self._key = ""
        self._arguments = 0
        self._types: frozenset[str] = frozenset()
        self._value = ""

    @property
    def saw_tool_call(self) -> bool:
        return self._sent

    def feed(self, pieces: Sequence[Piece]) -> list[Delta]:
        for piece in pieces:
            if piece.token_id is not None and piece.text in TOKEN_MARKERS:
                self._marker(piece.text)
            else:
                self._text(piece.text)
        out, self._out = self._out, []
        return out

    def finish(self) -> list[Delta]:
        if self._state is _State.VALUE_OR_END:  # the output ended right after it: the call's end
            self._end_value()
            self._end_call()
        self._held = None  # a call cut off before its first argument was complete is no call
        out, self._out = self._out, []
        return out

    def _marker(self, marker: str) -> None:
        state = self._state
        if state is _State.VALUE_OR_END:
            if marker == TOOL_CALL_START:
                self._end_value()
                self._end_call()
                self._state = _State.CONTENT
            else:
                self._value_text(TOOL_CALL_END)
                self._state = state = _State.VALUE
        if state is _State.START:
            if marker == THINK_START:
                self._state = _State.REASONING
                return
            self._state = state = _State.CONTENT
        if state is _State.REASONING:
            if marker == THINK_END:
                self._state = _State.CONTENT
            else:
                self._emit_reasoning(marker)
        elif state is _State.CONTENT:
            if marker == TOOL_CALL_START and self._parse_calls:
                self._name, self._arguments = "", 0
                self._state = _State.NAME
            else:
                self._emit_content(marker)
        elif state is _State.VALUE:
            if marker == ARG_VALUE_END:
                self._end_value()
                self._state = _State.BETWEEN
            elif marker == TOOL_CALL_END:
                self._state = _State.VALUE_OR_END
            else:
                self._value_text(marker)
        elif state is _State.KEY:
            if marker == ARG_KEY_END:
                self._state = _State.BETWEEN
        elif marker == ARG_KEY_START:
            self._open_call()
            self._key = ""
            self._state = _State.KEY
        elif marker == ARG_VALUE_START and self._key:
            self._start_value()
        elif marker == TOOL_CALL_END:
            self._open_call()
            self._end_call()
            self._state = _State.CONTENT

    def _text(self, text: str) -> None:
        state = self._state
        if state is _State.VALUE_OR_END:
            self._value_text(TOOL_CALL_END)
            self._state = state = _State.VALUE
        if state is _State.START:
            if not text.strip():
                self._emit_content(text)
                return
            self._state = state = _State.CONTENT
        if state is _State.REASONING:
            self._emit_reasoning(text)
        elif state is _State.CONTENT:
            self._emit_content(text)
        elif state is _State.NAME:
            self._name += text
        elif state is _State.KEY:
            self._key += text
        elif state is _State.VALUE:
            self._value_text(text)

    # calls

    def _open_call(self) -> None:
        """The name is complete (the first tag after it came): hold the call back from here."""
        if not self._call_open:
            self._held = [Delta(tool_index=self._calls, tool_id=new_call_id(), tool_name=self._name.strip())]
            self._call_open = True

    def _send(self, fragment: str) -> None:
        delta = Delta(tool_index=self._calls, tool_arguments=fragment)
        if self._held is not None:
            self._held.append(delta)
        else:
            self._out.append(delta)

    def _release(self) -> None:
        if self._held is not None:
            self._out += self._held
            self._held = None
            self._sent = True

    def _start_value(self) -> None:
        key = self._key.strip()
        self._types = schema_types(self._schemas.get(self._name.strip(), {}).get(key))
        quote = '"' if is_plain_string(self._types) else ""
        self._send(("{" if self._arguments == 0 else ", ") + json.dumps(key, ensure_ascii=False) + ": " + quote)
        self._arguments += 1
        self._value = ""
        self._state = _State.VALUE

    def _value_text(self, text: str) -> None:
        if is_plain_string(self._types):
            if text:
                self._send(json_fragment(text))
        else:
            self._value += text

    def _end_value(self) -> None:
        self._send('"' if is_plain_string(self._types) else json.dumps(convert(self._value, self._types)))
        self._key = ""
        self._release()

    def _end_call(self) -> None:
        self._send("{}" if self._arguments == 0 else "}")
        self._release()
        self._calls += 1
        self._call_open = False

    # content and reasoning

    def _emit_reasoning(self, text: str) -> None:
        if out := self._reasoning.push(text):
            self._out.append(Delta(reasoning=out))

    def _emit_content(self, text: str) -> None:
        if out := self._content.push(text):
            self._out.append(Delta(content=out))
