"""Incremental, token-aware parser of GLM output: `<think>` reasoning, content and XML-ish tool calls.

`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>`, every tag one added token
(a Piece with `token_id`); GLM-4.5 puts newlines between the parts, GLM-4.7 and 5.x do not (whitespace
outside keys and values is skipped, so one parser reads both). A tag spelled with ordinary tokens is text.

Decisions:
* Reasoning runs to `</think>` (from the output's `<think>`, or from the start when the prompt opened it);
  a `<tool_call>` token also ends it (the grammar keeps that token out of reasoning), and the `</think>` the
  model may still write after such calls is dropped. Output cut inside reasoning stays reasoning.
* A value is raw text up to `</arg_value>`, whitespace kept; tag tokens inside it are its text, except a
  `</tool_call>` token that ends the output or is followed by another call (a missing `</arg_value>`).
  Values are typed by the tool's schema; a plain string parameter streams as a JSON string.
* A key written twice (the grammar writes no declared one twice, but may two free ones of a name; an output no
  grammar constrained may) streams as written, both keys in the arguments: a JSON reader takes the last value at
  the first key's place, the dict vLLM's glm4_moe parser builds.
* A call is held back until its first argument (or `</tool_call>`) is complete, then sent with the arguments
  so far and streamed; a call cut off before that is no call, and so is a call without a name (dropped whole,
  as the token-section parsers drop any malformed call: its tags are no content).
* Content and reasoning lose leading and trailing whitespace.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum, auto

from gateway.families.streams import StreamedCallParser
from gateway.families.values import argument_types
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


_START, _REASONING, _CONTENT, _NAME = _State.START, _State.REASONING, _State.CONTENT, _State.NAME
_KEY, _BETWEEN, _VALUE, _VALUE_OR_END = _State.KEY, _State.BETWEEN, _State.VALUE, _State.VALUE_OR_END
"""The states as module names, read per token: in Python 3.11 `Enum` class attributes go through its metaclass's
`__getattr__` hook (~500 instructions a read; a module name ~10)."""


class GlmParser(StreamedCallParser):
    """Streams reasoning, content and tool calls out of GLM output."""

    states = _State
    think = (THINK_START, THINK_END)
    call_start = TOOL_CALL_START
    _name = ""  # the call's name as it arrives
    _call_open = False
    _key = ""  # the argument's key as it arrives

    def feed(self, pieces: Sequence[Piece]) -> list[Delta]:
        for piece in pieces:
            if piece.token_id is not None and piece.text in TOKEN_MARKERS:
                self._marker(piece.text)
            else:
                self._text(piece.text)
        return self._out.take()

    def finish(self) -> list[Delta]:
        if self._state is _VALUE_OR_END:  # the output ended right after it: the call's end
            self._end_value()
            self._end_call()
        self._out.drop_held_call()
        return self._out.take()

    def _marker(self, marker: str) -> None:
        state = self._state
        if state is _VALUE_OR_END:
            if marker == TOOL_CALL_START:  # the next call starts: read the marker as content would
                self._end_value()
                self._end_call()
                self._state = state = _CONTENT
            else:
                self._out.argument_text(TOOL_CALL_END)
                self._state = state = _VALUE
        state = self._think_marker(state, marker)
        if state is None:
            return
        if state is _CONTENT:
            if marker == TOOL_CALL_START and self._parse_calls:
                self._name = ""
                self._state = _NAME
            else:
                self._out.content(marker)
        elif state is _VALUE:
            if marker == ARG_VALUE_END:
                self._end_value()
                self._state = _BETWEEN
            elif marker == TOOL_CALL_END:
                self._state = _VALUE_OR_END
            else:
                self._out.argument_text(marker)
        elif state is _KEY:
            if marker == ARG_KEY_END:
                self._state = _BETWEEN
        elif marker == ARG_KEY_START:
            self._open_call()
            self._key = ""
            self._state = _KEY
        elif marker == ARG_VALUE_START and self._key:
            name = self._name.strip()
            self._out.start_argument(self._key.strip(), argument_types(self._schemas, name, self._key.strip()))
            self._state = _VALUE
        elif marker == TOOL_CALL_END:
            self._open_call()
            self._end_call()
            self._state = _CONTENT

    def _text(self, text: str) -> None:
        state = self._state
        if state is _VALUE_OR_END:
            self._out.argument_text(TOOL_CALL_END)
            self._state = state = _VALUE
        if state is _START:
            if not text.strip():
                self._out.content(text)
                return
            self._state = state = _CONTENT
        if state is _REASONING:
            self._out.reasoning(text)
        elif state is _CONTENT:
            self._out.content(text)
        elif state is _NAME:
            self._name += text
        elif state is _KEY:
            self._key += text
        elif state is _VALUE:
            self._out.argument_text(text)

    def _open_call(self) -> None:
        """The name is complete (the first tag after it came): the call is held back from here."""
        if not self._call_open:
            self._out.open_call(self._name.strip())
            self._call_open = True

    def _end_value(self) -> None:
        self._out.end_argument()
        self._key = ""

    def _end_call(self) -> None:
        self._out.close_call()
        self._call_open = False
