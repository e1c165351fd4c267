"""Incremental parser of tool calls held in token-delimited sections with JSON arguments (DeepSeek V3 / V3.1,
Kimi K2): `SECTION_BEGIN (CALL_BEGIN header ARGS_BEGIN body CALL_END)* SECTION_END`, plus `<think>` reasoning.

Decisions (the gateway's documented behaviour):
* Markers count only when they arrive as their tokens (a Piece with `token_id`);
  text that spells them is text. Inside a call's body every token but the
  call's end is body text, and the end token counts only outside a JSON
  string, so a value that holds the end marker (the tokenizer makes it a
  token there too) does not cut the call.
* A call is emitted whole, when its end token arrives (or the output ends
  after a body that is complete): name and id and the re-serialized JSON
  arguments in one delta. A body that is not a JSON object, or a header with
  no name, is no call. So output cut inside a call, or a malformed call,
  yields no call, however the output is chunked.
* Text outside a section is content, verbatim; text inside a section but
  outside a call is dropped, and so is a call marker token outside a section.
  Reasoning runs from the start (when the prompt opened `<think>`, or the
  output opens it first, after whitespace at most; a `<think>` the model writes
  again where the prompt opened one, after whitespace at most, is dropped) to the `</think>` token,
  or to a section or call begin token (Kimi K2.5 calls without closing its
  think block; the `</think>` the model may still write after such calls is
  dropped, `streams.ReasoningCut`); output cut inside reasoning stays reasoning.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum, auto

from gateway.families.calls import CallParser, is_call_name, json_object
from gateway.families.streams import ReasoningCut

_QUOTE_OR_ESCAPE = re.compile(r'["\\]')


@dataclass(frozen=True)
class SectionMarkers:
    """The control-token spellings of one section format."""

    section_begin: str
    section_end: str
    call_begin: str
    call_end: str
    arguments_begin: str
    think_start: str = "<think>"
    think_end: str = "</think>"
    ignored: frozenset[str] = frozenset()
    """Tokens dropped wherever they appear (end-of-turn tokens a backend may pass through)."""

    @property
    def call_tokens(self) -> frozenset[str]:
        """The spellings that structure sections and calls (a vocabulary that has them all speaks this format)."""
        return frozenset({self.section_begin, self.section_end, self.call_begin, self.call_end, self.arguments_begin})


CallSplitter = Callable[[str, str], "tuple[str, str] | None"]
"""(header, body) of one call → (tool name, JSON arguments text), or None when the call is malformed."""


class _Mode(Enum):
    REASONING = auto()
    CONTENT = auto()
    SECTION = auto()
    HEADER = auto()
    BODY = auto()


_REASONING, _CONTENT, _SECTION, _HEADER, _BODY = _Mode.REASONING, _Mode.CONTENT, _Mode.SECTION, _Mode.HEADER, _Mode.BODY
"""The modes as module names, read per token: in Python 3.11 `Enum` class attributes go through its metaclass's
`__getattr__` hook (~500 instructions a read; a module name ~10)."""


@dataclass
class _Body:
    """A call's body text and whether its JSON scan ends inside a string."""

    parts: list[str] = field(default_factory=list)
    in_string: bool = False
    escaped: bool = False

    def add(self, text: str) -> None:
        self.parts.append(text)
        if not self.escaped and '"' not in text and "\\" not in text:
            return  # nothing that changes the scan (most tokens of a long argument)
        skip = 0  # the character after a backslash in a string is taken whatever it is
        if self.escaped and text:
            self.escaped, skip = False, 1
        for match in _QUOTE_OR_ESCAPE.finditer(text, skip):
            at = match.start()
            if at < skip:
                continue
            if match.group() == '"':
                self.in_string = not self.in_string
            elif self.in_string:
                skip = at + 2
                self.escaped = skip > len(text)


class SectionParser(CallParser):
    """One choice's parser; `in_reasoning` says the prompt ended inside `<think>`."""

    def __init__(self, markers: SectionMarkers, split_call: CallSplitter, in_reasoning: bool):
        super().__init__()
        self._markers = markers
        self._split = split_call
        self._mode = _REASONING if in_reasoning else _CONTENT
        self._started = False
        self._leading = ""
        self._header: list[str] = []
        self._body: _Body | None = None
        self._cut = ReasoningCut()

    def _end(self) -> None:
        if self._mode is _BODY and not self._body.in_string:
            self._end_call()
        self._mode = _CONTENT
        self._content("")

    def _content(self, text: str) -> None:
        """Content text, after the whitespace held before it (which may have been a think block's indent)."""
        if self._leading:
            text, self._leading = self._leading + text, ""
        if text:
            self._started = True
            self._text_delta(content=text)

    def _text(self, text: str) -> None:
        mode = self._mode
        if mode is _REASONING:
            self._started = self._started or not text.isspace()  # a `<think>` after whitespace is still the opening one
            self._text_delta(reasoning=text)
        elif mode is _CONTENT:
            if self._started or not text.isspace():
                self._content(text)
            else:  # whitespace before anything else: a `<think>` may still open the output
                self._leading += text
        elif mode is _HEADER:
            self._header.append(text)
        elif mode is _BODY:
            self._body.add(text)

    def _control(self, spelling: str) -> None:
        m, mode = self._markers, self._mode
        if spelling in m.ignored:
            return
        if mode is _BODY:
            if spelling == m.call_end and not self._body.in_string:
                self._end_call()
                self._mode = _SECTION
            else:
                self._body.add(spelling)
        elif mode is _HEADER:
            if spelling == m.arguments_begin:
                self._body = _Body()
                self._mode = _BODY
            elif spelling == m.section_end:
                self._mode = _CONTENT
            elif spelling != m.call_begin:
                self._header.append(spelling)
        elif mode is _SECTION:
            if spelling == m.call_begin:
                self._header = []
                self._mode = _HEADER
            elif spelling == m.section_end:
                self._mode = _CONTENT
        elif spelling in (m.section_begin, m.call_begin):  # in reasoning too: calls end it (Kimi K2.5 omits `</think>`)
            if mode is _REASONING:
                self._cut.cut()
            self._content("")
            self._mode = _SECTION if spelling == m.section_begin else _HEADER
            self._header = []
        elif mode is _REASONING:
            if spelling == m.think_end:
                self._mode = _CONTENT
            elif not (spelling == m.think_start and not self._started):
                self._started = True
                self._text_delta(reasoning=spelling)
        elif spelling == m.think_start and not self._started:
            self._leading = ""
            self._mode = _REASONING
        elif self._cut.takes_end(spelling == m.think_end):
            return
        elif spelling not in m.call_tokens:  # a call marker outside a section is no text
            self._content(spelling)

    def _end_call(self) -> None:
        body, self._body = self._body, None
        split = self._split("".join(self._header), "".join(body.parts))
        if split is None:
            return
        name, arguments = split
        value = json_object(arguments)
        if not is_call_name(name) or value is None:
            return
        self._emit_call(name, json.dumps(value, ensure_ascii=False))
