"""Incremental, token-aware parser of Qwen's XML tool calls.

`<think>`, `</think>`, `<tool_call>` and `</tool_call>` are structure only as
their added tokens (a Piece with `token_id`); spelled with ordinary tokens, or
inside a parameter value, they are text. Inside a call the tags are text:
`<function=NAME>`, then `<parameter=KEY>` VALUE `</parameter>` per argument,
then `</function>`.

Decisions:
* Reasoning runs to `</think>` (from the output's `<think>`, or from the start
  when the prompt opened it); a `<tool_call>` token also ends it, and the
  `</think>` the model may still write after such calls is dropped. Output cut
  inside reasoning stays reasoning.
* A value loses one leading and one trailing newline, nothing else. It ends
  at `</parameter>` followed (after whitespace) by `<parameter=` or
  `</function>`, or at a newline followed by either (a missing
  `</parameter>`); other tag spellings inside a value are its text. An end
  whose text up to that tag passes MAX_TAG_CHARS is value text, whole as
  when streamed (a feed holds no longer tail).
* Values are typed by the tool's schema (`values.convert`); a plain string
  parameter streams as a JSON string while it arrives, others when complete.
* A call is held back until its first argument (or `</function>`) is
  complete, then sent with the arguments so far and streamed; a call cut off
  before that is no call; text after `<tool_call>` that cannot become
  `<function=NAME>`, NAME of the characters a tool name may hold, is content
  (vLLM drops a `<function={{ tc.name }}>` call an unrendered template wrote). With `bare_calls`, a `<function=NAME>` in
  content, NAME an offered tool, opens a call without `<tool_call>`
  (Qwen3-Coder sometimes omits it): only for output that no grammar
  constrained. The gateway's grammar checks the calls that the `<tool_call>`
  token opens and lets free text spell anything else, so under it a spelled
  `<function=…>` is content: its arguments were never checked.
* A parameter written twice (the grammar writes no declared one twice, but two
  free ones of a name it cannot count; an output no grammar constrained may)
  streams as written, both keys in the arguments: a JSON reader takes the last
  value at the first key's place, the dict vLLM's qwen3_coder parser builds.
* Content and reasoning lose leading and trailing whitespace.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from enum import auto
from typing import Any

from gateway.families.base import ParserState
from gateway.families.chatml_tokens import THINK_END, THINK_START, TOKEN_MARKERS, TOOL_CALL_END, TOOL_CALL_START
from gateway.families.streams import StreamedCallParser
from gateway.families.values import argument_types
from gateway.types import Delta, Piece

from .markers import FUNCTION_CLOSE, FUNCTION_OPEN, PARAMETER_CLOSE, PARAMETER_OPEN

_FUNCTION = re.compile(r"\s*<function=([A-Za-z0-9_.:-]+)>")
"""A call's header: its name one the gateway accepts for a tool (`validation/chat.py::TOOL_NAME`), so a header no tool
could be named by (an unrendered template's `<function={{ tc.name }}>`) is no call."""
_PARAMETER = re.compile(r"\s*<parameter=([^>\n]*)>")
_FUNCTION_END = re.compile(r"\s*</function>")
_VALUE_END = re.compile(
    r"\n?</parameter>(?=(\s*(?:<parameter=[^>\n]*>|</function>)))|\n(?=(<parameter=[^>\n]*>|</function>))"
)
"""A value's end; group 1 or 2 is the tag after it, which only the lookahead reads."""
_NEXT_TAGS = (PARAMETER_OPEN, FUNCTION_CLOSE)
MAX_TAG_CHARS = 256
"""Text held back as a possible tag (a name, whitespace between tags) is at most this long: beyond, it is text,
so hostile output cannot make each token rescan an ever longer tail."""


def _could_become(text: str, literals: Iterable[str]) -> bool:
    """Whether more text could still make `text` one of the tags `literals` open (a prefix, or an unclosed tag)."""
    if len(text) > MAX_TAG_CHARS:
        return False
    return any(lit.startswith(text) or (text.startswith(lit) and not {">", "\n"} & set(text)) for lit in literals)


def _value_end(text: str) -> tuple[int, int] | None:
    """(start, end) of the first value end in `text` that a feed holding a value's tail at most MAX_TAG_CHARS
    long (`_held_value_tail`) also reads as one: from its first character up to the tag after it, all but that
    tag's last character fit. A `\n</parameter>` one character too long ends at its `<` (the newline stays in the
    value, as a feed gave it out). The same answer for the whole output as for its tail, however it was cut."""
    for end in _VALUE_END.finditer(text):
        start, reach = end.start(), max(end.end(1), end.end(2))
        if reach - start - 1 <= MAX_TAG_CHARS:
            return start, end.end()
        if text.startswith("\n" + PARAMETER_CLOSE, start) and reach - start - 2 <= MAX_TAG_CHARS:
            return start + 1, end.end()
    return None


def _value_end_could_start(text: str) -> bool:
    """Whether `text` (the tail of a value) could grow into a value end (`_VALUE_END` with its lookahead)."""
    if len(text) > MAX_TAG_CHARS:
        return False
    body = text.removeprefix("\n")
    if PARAMETER_CLOSE.startswith(body):
        return True
    if body.startswith(PARAMETER_CLOSE):
        rest = body[len(PARAMETER_CLOSE) :].lstrip()
        return _tag_prefix(rest)
    return text.startswith("\n") and _tag_prefix(body)


def _tag_prefix(text: str) -> bool:
    """`text` is a prefix of `<parameter=NAME>` (name unclosed) or of `</function>`."""
    if FUNCTION_CLOSE.startswith(text) or PARAMETER_OPEN.startswith(text):
        return True
    return text.startswith(PARAMETER_OPEN) and not any(c in text[len(PARAMETER_OPEN) :] for c in ">\n")


class _State(ParserState):
    START = auto()
    REASONING = auto()
    CONTENT = auto()
    CALL = auto()  # after <tool_call>: expecting <function=NAME>
    BODY = auto()  # inside <function>: expecting <parameter=KEY> or </function>
    VALUE = auto()
    AFTER = auto()  # after </function>: expecting </tool_call>


_START, _REASONING, _CONTENT, _CALL = _State.START, _State.REASONING, _State.CONTENT, _State.CALL
_BODY, _VALUE, _AFTER = _State.BODY, _State.VALUE, _State.AFTER
"""The states as module names, read per token: in Python 3.11 `Enum` class attributes go through its metaclass's
`__getattr__` hook (~500 instructions a read; a module name ~10)."""


class Qwen3XmlParser(StreamedCallParser):
    """Streams reasoning, content and tool calls out of Qwen XML output."""

    states = _State
    think = (THINK_START, THINK_END)
    call_start = TOOL_CALL_START
    _buffer = ""  # text not yet consumed by the current state's step
    _function = ""  # the open call's name
    _value_started = False

    def __init__(
        self,
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        tool_calls: bool = True,
        in_reasoning: bool = False,
        bare_calls: bool = False,
    ) -> None:
        """As `StreamedCallParser`; `bare_calls`: a `<function=NAME>` in content opens a call (output no grammar
        constrained, such as recorded raw model output)."""
        super().__init__(tools, tool_calls=tool_calls, in_reasoning=in_reasoning)
        self._bare_calls = bare_calls

    def feed(self, pieces: Sequence[Piece]) -> list[Delta]:
        for piece in pieces:
            if piece.token_id is not None and piece.text in TOKEN_MARKERS:
                self._advance(final=False)
                if self._state is not _VALUE:  # inside a value a marker token is text
                    self._marker(piece.text)
                    continue
            self._buffer += piece.text
        self._advance(final=False)
        return self._out.take()

    def finish(self) -> list[Delta]:
        self._advance(final=True)
        if self._state is _VALUE and self._out.streaming_call:
            self._out.argument_text(self._buffer)
        elif self._state is _CONTENT and self._buffer:
            self._out.content(self._buffer)
        self._buffer = ""
        self._out.drop_held_call()
        return self._out.take()

    # markers (added tokens outside values)

    def _marker(self, marker: str) -> None:
        state = self._think_marker(self._state, marker)
        if state is None:
            return
        if state is _CONTENT:
            if marker == TOOL_CALL_START and self._parse_calls:
                self._out.content(self._buffer)
                self._buffer = ""
                self._state = _CALL
            elif marker != TOOL_CALL_END or not self._parse_calls:
                self._buffer += marker
        elif state is _AFTER:
            self._state = _CALL if marker == TOOL_CALL_START else _CONTENT
        elif marker == TOOL_CALL_END and state is _BODY:
            self._out.close_call()
            self._state = _CONTENT
        elif marker == TOOL_CALL_END:  # a call that never named its function
            self._buffer = ""
            self._state = _CONTENT

    # text

    def _advance(self, final: bool) -> None:
        steps = _STEPS
        while self._buffer and steps[self._state](self, final):
            pass

    def _start(self, final: bool) -> bool:
        if self._buffer.strip() or final:
            self._state = _CONTENT
            return True
        return False

    def _in_reasoning(self, final: bool) -> bool:
        self._out.reasoning(self._buffer)
        self._buffer = ""
        return False

    def _in_content(self, final: bool) -> bool:
        if not self._bare_calls or not self._parse_calls or not self._schemas:
            self._out.content(self._buffer)
            self._buffer = ""
            return False
        for match in re.finditer(re.escape(FUNCTION_OPEN), self._buffer):
            head = _FUNCTION.match(self._buffer, match.start())
            if head and head[1] in self._schemas:
                self._out.content(self._buffer[: match.start()])
                self._buffer = self._buffer[match.start() :]
                self._state = _CALL
                return True
        held = 0 if final else self._held_function_prefix()
        self._out.content(self._buffer[: len(self._buffer) - held])
        self._buffer = self._buffer[len(self._buffer) - held :]
        return False

    def _held_function_prefix(self) -> int:
        """Length of the buffer's tail that could still become `<function=NAME>` for an offered NAME."""
        at = self._buffer.rfind("<")
        if at < 0:
            return 0
        tail = self._buffer[at:]
        if FUNCTION_OPEN.startswith(tail):
            return len(tail)
        name = tail[len(FUNCTION_OPEN) :]
        if tail.startswith(FUNCTION_OPEN) and any(n.startswith(name) for n in self._schemas):
            return len(tail)
        return 0

    def _in_call(self, final: bool) -> bool:
        head = _FUNCTION.match(self._buffer)
        if head is None:
            could_become = _could_become(self._buffer.lstrip(), [FUNCTION_OPEN])
            if not final and could_become:
                return False
            if could_become:  # a header cut off by the end of the output: no call, and no markup in content
                self._buffer = ""
            self._state = _CONTENT  # not a call: its text is content, however the output was chunked
            return bool(self._buffer)
        self._buffer = self._buffer[head.end() :]
        self._function = head[1]
        self._out.open_call(head[1])
        self._state = _BODY
        return True

    def _in_body(self, final: bool) -> bool:
        parameter = _PARAMETER.match(self._buffer)
        if parameter:
            self._buffer = self._buffer[parameter.end() :]
            self._out.start_argument(parameter[1], argument_types(self._schemas, self._function, parameter[1]))
            self._value_started = False
            self._state = _VALUE
            return True
        end = _FUNCTION_END.match(self._buffer)
        if end:
            self._buffer = self._buffer[end.end() :]
            self._out.close_call()
            self._state = _AFTER
            return True
        if not final and _could_become(self._buffer.lstrip(), _NEXT_TAGS):
            return False
        stray = self._buffer.find("<", 1)  # stray text between arguments: skipped up to the next tag
        self._buffer = self._buffer[stray:] if stray > 0 else ""
        return True

    def _in_value(self, final: bool) -> bool:
        if not self._value_started:
            if self._buffer == "\n" and not final:
                return False
            self._buffer = self._buffer.removeprefix("\n")
            self._value_started = True
        if "<" not in self._buffer and "\n" not in self._buffer:  # no value end starts in it (most tokens)
            self._out.argument_text(self._buffer)
            self._buffer = ""
            return False
        end = _value_end(self._buffer)
        if end:
            self._out.argument_text(self._buffer[: end[0]])
            self._buffer = self._buffer[end[1] :]
            self._out.end_argument()
            self._state = _BODY
            return True
        keep = 0 if final else self._held_value_tail()
        self._out.argument_text(self._buffer[: len(self._buffer) - keep])
        self._buffer = self._buffer[len(self._buffer) - keep :]
        return False

    def _held_value_tail(self) -> int:
        """Length of the buffer's tail that could still grow into the value's end."""
        for at in range(max(0, len(self._buffer) - MAX_TAG_CHARS), len(self._buffer)):
            if self._buffer[at] in "\n<" and _value_end_could_start(self._buffer[at:]):
                return len(self._buffer) - at
        return 0

    def _after_function(self, final: bool) -> bool:
        text = self._buffer.lstrip()
        if not text:
            self._buffer = ""
            return False
        self._buffer = text
        self._state = _CONTENT
        return True


_STEPS = {
    _START: Qwen3XmlParser._start,
    _REASONING: Qwen3XmlParser._in_reasoning,
    _CONTENT: Qwen3XmlParser._in_content,
    _CALL: Qwen3XmlParser._in_call,
    _BODY: Qwen3XmlParser._in_body,
    _VALUE: Qwen3XmlParser._in_value,
    _AFTER: Qwen3XmlParser._after_function,
}
