"""Incremental parser of hermes output: `<think>` reasoning, content and `<tool_call>` JSON calls.

Decisions (the gateway's documented behaviour):
* Reasoning is a `<think>…</think>` block at the start of the output (after whitespace at most), or
  everything up to `</think>` when the prompt already opened `<think>` (a `<think>`
  the model writes again first is dropped). It
  streams as it arrives; when the output ends before `</think>` (cut by
  max_tokens) the text stays reasoning, as the canitoolcall fixtures expect.
  A `<tool_call>` token inside reasoning ends it and opens a call (the grammar keeps that token out of
  reasoning; vLLM's Qwen3 reasoning parser promotes such calls too, and so does the qwen3_xml parser), and the
  `</think>` token the model may still write after such calls is dropped. Spelled in text (a vocabulary
  without the token) it stays reasoning.
* Content and reasoning lose their leading whitespace (content keeps it when it continues a prefill,
  `continue_final_message`). Content is the text outside calls joined, so
  whitespace before and after a call that text follows stays between the two
  texts (as the peers' streams send it); whitespace before a call that no
  text follows, and at the end of reasoning, is dropped. Trailing content
  whitespace is kept when the output ends without a call (text cut by a stop
  string keeps its last space). A suffix that could begin a marker is
  held back, so content never shows part of one.
* A block holds one call body, or several listed with `,` (`{…}, {…}`, as
  SGLang's base detector reads them; the templates write one per block).
  After a body's arguments anything but whitespace, the body's `}` and that
  `,` (or arguments cut short by a `<`) makes the rest of the block junk,
  skipped up to `</tool_call>`, whichever chunk it came in.
* A call body `{"name": N, "arguments": {…}}` is held back until its first
  argument is complete (a `,` after the first member of the arguments
  object, or the `}` that closes the arguments, or `</tool_call>`); then the
  call (index, id, name) and the arguments so far are sent, and the rest of
  the arguments streams verbatim: the fragments concatenate to the arguments
  JSON. A call cut off by the end of the output before that point is dropped
  (no call, no markup), as every family's parser drops one (the name alone
  is no call); one cut later stays as sent (it cannot be taken back from a
  stream), so a call whose arguments closed is a call even when its body's
  `}` or `</tool_call>` was cut, as a Qwen3 XML call after `</function>` or a
  token-section body complete at the end. A bare word of the arguments
  (number, literal, or any other unquoted word) is held until it ends: one
  JSON has (`true`, `false`, `null`, a finite number) goes verbatim, any
  other (`True`, `None`, an unquoted key, NaN, Infinity, `1e999`: no JSON
  parser gives it back) as a JSON string, its text, so the arguments a
  client gets are JSON wherever the word stands. The call is sent at the
  first member's `,` whatever the chunking, so the answer is the same
  however the output is cut. Other body layouts are parsed whole at
  `</tool_call>`, a non-finite number kept as its text there too
  (`values.json_keeping_text`). A body that is not a call (a call without
  a name is none, as in qwen3_xml: `calls.is_call_name`) is returned as
  content, markers included. A call header cut off by the end of the output is
  dropped, never content, where `<tool_call>` is its token (the model opened a
  call, as every token-marker family drops a cut call) or the tool choice
  forced calls (`required` or a named tool: the grammar allows nothing else);
  after a `<tool_call>` spelled as text it is content.
* Markers are matched on text where the vocabulary has no token for them
  (SmolLM2); a marker the vocabulary has as an added token (`token_markers`:
  Qwen's `<tool_call>`, `</tool_call>`, Qwen3's `<think>`, `</think>`) counts
  only as that token (a Piece with `token_id`), as the grammar writes it: its
  spelling in ordinary tokens is text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from enum import Enum, auto
from typing import Any

from backends.stop_strings import held_prefix
from gateway.families.base import OutputParser, ParserState
from gateway.families.calls import is_call_name, json_object
from gateway.families.chatml_tokens import THINK_END, THINK_START, TOOL_CALL_END, TOOL_CALL_START
from gateway.families.streams import ReasoningCut, Trimmed
from gateway.families.values import strict_json
from gateway.ids import new_call_id
from gateway.types import Delta, Piece

_JSON_STRING = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
_LISTED_CALL = re.compile(r"\s*(?:\}\s*)?,")
"""After a call's arguments: the body's `}` (unless already read), then the `,` that lists another call (a `{`
follows)."""
_CALL_HEADER_PATTERN = re.compile(
    r'\s*\{\s*"name"\s*:\s*(?P<name>' + _JSON_STRING + r')\s*,\s*"arguments"\s*:\s*(?=\{)'
)


class _State(ParserState):
    START = auto()
    REASONING = auto()
    CONTENT = auto()
    CALL_HEADER = auto()
    CALL_ARGUMENTS = auto()
    CALL_TAIL = auto()


_START, _REASONING, _CONTENT = _State.START, _State.REASONING, _State.CONTENT
_CALL_HEADER, _CALL_ARGUMENTS, _CALL_TAIL = _State.CALL_HEADER, _State.CALL_ARGUMENTS, _State.CALL_TAIL
"""The states as module names, read per token: in Python 3.11 `Enum` class attributes go through its metaclass's
`__getattr__` hook (~500 instructions a read; a module name ~10)."""


class _Tail(Enum):
    """Where a call's tail (after its arguments, up to `</tool_call>`) stands."""

    OPEN = auto()  # the arguments closed: whitespace, then the body's `}`
    CLOSED = auto()  # the body's `}` was read: whitespace, then a `,` may list another call
    JUNK = auto()  # anything else (or the arguments were cut short by a `<`): skipped up to a call marker


_TAIL_OPEN, _TAIL_CLOSED, _TAIL_JUNK = _Tail.OPEN, _Tail.CLOSED, _Tail.JUNK
"""The tail's positions as module names (read per token, as the states)."""


class _JsonEnd:
    """Finds where a streamed JSON object ends, aware of strings and escapes.

    A `<` outside a string also ends it: JSON never has one there, so the
    arguments were cut short and a marker follows. A bare word (number or
    literal) is held back until it ends, so one JSON does not have (`True`,
    `NaN`, `1e999`) is found before any of it is sent.
    """

    def __init__(self) -> None:
        self.done = False
        self.first_member_done = False
        """A `,` at the object's top level, or the `}` that closes it: its first member (if any) is complete."""
        self.not_json = ""
        """The bare word JSON does not have that the scan stopped before (empty: none); the caller reads it and
        clears it."""
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._word_scanned = 0
        """How much of the bare word the last scan stopped before was read: the next `text` starts with it."""

    @property
    def closed(self) -> bool:
        """The value's brackets closed (it was not cut short by a `<`)."""
        return self.done and self._depth == 0

    def scan(self, text: str, final: bool = False) -> int:
        """How many characters of `text` still belong to the value and can be sent; the scan stops after the first
        member's `,` (the call's release point, whatever the chunking) and before a bare word JSON does
        not have."""
        if self._in_string and not self._escaped and '"' not in text and "\\" not in text:
            return len(text)  # inside a string that goes on (most argument tokens): nothing to scan for
        start, self._word_scanned = self._word_scanned, 0
        word = 0 if start else -1  # a word held back is read on from where the last scan stopped, not again
        for i, ch in enumerate(text[start:], start):
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif ch == "\\":
                    self._escaped = True
                elif ch == '"':
                    self._in_string = False
                continue
            if ch not in _DELIMITERS:
                if word < 0:
                    word = i
                continue
            if word >= 0:
                if _not_json(text[word:i]):
                    self.not_json = text[word:i]
                    return word
                word = -1
            if ch == '"':
                self._in_string = True
            elif ch == "," and self._depth == 1:
                if not self.first_member_done:
                    self.first_member_done = True
                    return i + 1
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth == 0:
                    self.done = self.first_member_done = True
                    return i + 1
            elif ch == "<":
                self.done = True
                return i
        if word >= 0 and not final:
            self._word_scanned = len(text) - word
            return word
        if word >= 0 and _not_json(text[word:]):
            self.not_json = text[word:]
            return word
        return len(text)


_DELIMITERS = frozenset('"{}[],:< \t\n\r')
_JSON_LITERALS = frozenset({"true", "false", "null"})
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")


def _not_json(word: str) -> bool:
    """Whether a bare word is none JSON has (as `strict_json` reads it): a word but `true`, `false`, `null`, or a
    number `strict_json` refuses (NaN, Infinity, a float past a double's range; an integer past a double is JSON's,
    one past Python's digit limit not)."""
    if word in _JSON_LITERALS:
        return False
    if not _JSON_NUMBER.fullmatch(word):
        return True
    try:
        strict_json(word)
    except ValueError:
        return True
    return False


def parse_whole_call(body: str) -> tuple[str, str] | None:
    """(name, arguments JSON) of a complete call body, or None if it is not a call; a number no JSON parser gives
    back is kept as its text, as the streamed arguments keep it."""
    call = json_object(body)
    if call is None or not is_call_name(call.get("name")):
        return None
    arguments: Any = call.get("arguments", {})
    if isinstance(arguments, str):
        arguments = json_object(arguments)
    if not isinstance(arguments, dict):
        return None
    return call["name"], json.dumps(arguments, ensure_ascii=False)


class HermesParser(OutputParser):
    """Streams reasoning, content and tool calls out of hermes-format output."""

    def __init__(
        self,
        *,
        tool_calls: bool = True,
        in_reasoning: bool = False,
        forced_calls: bool = False,
        continues: bool = False,
        token_markers: frozenset[str] = frozenset(),
    ) -> None:
        """`tool_calls`: parse `<tool_call>` blocks (else they are content); `in_reasoning`: the prompt opened `<think>`;
        `forced_calls`: the answer is calls only (a cut marker or call header is dropped at the end); `continues`: the
        output continues the prompt's last assistant text (a prefill), so it is content from its first character;
        `token_markers`: the markers that count only as their added token."""
        self._parse_calls = tool_calls
        self._forced_calls = forced_calls
        self._state = _REASONING if in_reasoning else _CONTENT if continues else _START
        self._buffer = ""
        self._token_markers = token_markers
        self._text_call_markers = tuple(m for m in (TOOL_CALL_END, TOOL_CALL_START) if m not in token_markers)
        self._base = 0
        """How many characters of the output came before the buffer."""
        self._marks: set[int] = set()
        """Where a marker token starts in the output (a character offset)."""
        self._reasoning = Trimmed()
        self._content = Trimmed(keep_leading=continues)
        self._arguments = _JsonEnd()
        self._call_count = 0
        self._out: list[Delta] = []
        self._held_call: list[Delta] | None = None
        """The current call's deltas, held back until its first argument is complete (None: not holding)."""
        self._call_sent = False
        self._cut = ReasoningCut()
        self._tail = _TAIL_OPEN
        self._listed = False
        """In the call's tail: the `,` after the body was read (a `{` next opens another call)."""
        self._rethought = False
        """Before any reasoning: the `<think>` the model wrote again was dropped."""

    @property
    def saw_tool_call(self) -> bool:
        return self._call_count > 0 or self._call_sent

    def feed(self, pieces: Sequence[Piece]) -> list[Delta]:
        if (
            self._state is _CONTENT
            and not self._buffer
            and len(pieces) == 1
            and pieces[0].token_id is None
            and "<" not in pieces[0].text
        ):
            # Most steps: one piece of text in content, none of it a marker's (every marker starts with `<`): what
            # `_in_content` makes of it (no call starts, nothing held back), without its steps.
            text = pieces[0].text
            self._base += len(text)
            out = self._content.push(text)
            return [Delta(out)] if out else []  # positional: `content` is its first field (keywords cost a dict)
        if self._token_markers and (len(pieces) != 1 or pieces[0].token_id is not None):
            self._mark_tokens(pieces)
        self._buffer += pieces[0].text if len(pieces) == 1 else "".join([p.text for p in pieces])
        return self._advance(final=False)

    def _mark_tokens(self, pieces: Sequence[Piece]) -> None:
        at = self._base + len(self._buffer)
        for piece in pieces:
            if piece.token_id is not None and piece.text in self._token_markers:
                self._marks.add(at)
            at += len(piece.text)

    def _find(self, marker: str) -> int:
        """Where `marker` starts in the buffer (-1: nowhere); a token marker only where its token came."""
        at = self._buffer.find(marker)
        if marker in self._token_markers:
            while at >= 0 and self._base + at not in self._marks:
                at = self._buffer.find(marker, at + 1)
        return at

    def _drop(self, size: int) -> None:
        """The buffer's first `size` characters are read."""
        self._buffer = self._buffer[size:]
        self._base += size

    def _held(self, final: bool, text_markers: tuple[str, ...]) -> int:
        """How long a suffix of the buffer could still become one of `text_markers`."""
        return 0 if final or not text_markers else held_prefix(self._buffer, text_markers)

    def finish(self) -> list[Delta]:
        out = self._advance(final=True)
        self._held_call = None  # a call cut off before its first argument was complete is no call
        if self._state is _CONTENT and not self.saw_tool_call and (space := self._content.flush()):
            out.append(Delta(space))
        return out

    def _advance(self, final: bool) -> list[Delta]:
        steps = _STEPS
        while steps[self._state](self, final):
            pass
        out, self._out = self._out, []
        return out

    # Each step consumes what it can from the buffer; True means "state changed, go on".

    def _start(self, final: bool) -> bool:
        self._drop(len(self._buffer) - len(self._buffer.lstrip()))  # whitespace may come before the think block
        if self._find(THINK_START) == 0:
            self._drop(len(THINK_START))
            self._state = _REASONING
            return True
        if not final and (
            not self._buffer or (THINK_START not in self._token_markers and THINK_START.startswith(self._buffer))
        ):
            return False
        self._state = _CONTENT
        return True

    def _in_reasoning(self, final: bool) -> bool:
        if not self._reasoning.started and not self._past_reopened_think(final):
            return False
        end = self._find(THINK_END)
        call = self._find(TOOL_CALL_START) if self._parse_calls and TOOL_CALL_START in self._token_markers else -1
        if call >= 0 and (end < 0 or call < end):
            self._emit_reasoning(self._buffer[:call])
            self._drop(call + len(TOOL_CALL_START))
            self._cut.cut(end_token=THINK_END in self._token_markers)
            self._state = _CALL_HEADER
            return True
        if end >= 0:
            self._emit_reasoning(self._buffer[:end])
            self._drop(end + len(THINK_END))
            self._state = _CONTENT
            return True
        self._emit_reasoning(self._take_unheld(final, THINK_END))
        return False

    def _past_reopened_think(self, final: bool) -> bool:
        """Before any reasoning text: a `<think>` the model writes again after the one its prompt opened is dropped
        (one block); False while the buffer could still become one."""
        self._drop(len(self._buffer) - len(self._buffer.lstrip()))
        if not self._rethought and self._find(THINK_START) == 0:
            self._drop(len(THINK_START))
            self._rethought = True  # one only: a second is text, whether it came in this piece or a later one
        rest = self._buffer
        return final or bool(rest) and (THINK_START in self._token_markers or not THINK_START.startswith(rest))

    def _in_content(self, final: bool) -> bool:
        if not self._parse_calls:
            self._emit_content(self._buffer)
            self._drop(len(self._buffer))
            return False
        start = self._find(TOOL_CALL_START)
        if self._cut.awaits_end and 0 <= (end := self._find(THINK_END)) and (start < 0 or end < start):
            self._cut.takes_end(True)
            self._emit_content(self._buffer[:end])
            self._drop(end + len(THINK_END))
            return True
        if start >= 0:
            self._emit_content(self._buffer[:start])
            self._drop(start + len(TOOL_CALL_START))
            self._state = _CALL_HEADER
            return True
        self._emit_content(self._take_unheld(final and not self._forced_calls, TOOL_CALL_START))
        return False

    def _call_header(self, final: bool) -> bool:
        close = self._find(TOOL_CALL_END)
        header = _CALL_HEADER_PATTERN.match(self._buffer)
        name = json.loads(header["name"]) if header else None
        if header and (close < 0 or header.end() <= close) and is_call_name(name):
            self._held_call = [Delta(tool_index=self._call_count, tool_id=new_call_id(), tool_name=name)]
            self._drop(header.end())
            self._arguments = _JsonEnd()
            self._state = _CALL_ARGUMENTS
            return True
        if close >= 0:
            body = self._buffer[:close]
            self._drop(close + len(TOOL_CALL_END))
            self._state = _CONTENT
            call = parse_whole_call(body)
            if call is None:
                self._emit_content(TOOL_CALL_START + body + TOOL_CALL_END)
                return True
            name, arguments = call
            index = self._call_count
            self._out.append(Delta(tool_index=index, tool_id=new_call_id(), tool_name=name))
            self._out.append(Delta(tool_index=index, tool_arguments=arguments))
            self._call_count += 1
            return True
        if final:
            if not self._forced_calls and TOOL_CALL_START not in self._token_markers:
                self._emit_content(TOOL_CALL_START + self._buffer)
            self._drop(len(self._buffer))
            self._state = _CONTENT
        return False

    def _call_arguments(self, final: bool) -> bool:
        size = self._arguments.scan(self._buffer, final)
        if size:
            self._send(Delta("", "", self._call_count, None, None, self._buffer[:size]))
            self._buffer = self._buffer[size:]  # self._drop(size), inline: once per argument token
            self._base += size
        if self._arguments.not_json:
            return self._not_json_word()
        if self._arguments.first_member_done:
            self._release_call()
        if self._arguments.done:
            self._tail = _TAIL_OPEN if self._arguments.closed else _TAIL_JUNK
            self._state = _CALL_TAIL
            return True
        return size > 0 and bool(self._buffer)  # stopped at the first member's `,`: read on

    def _not_json_word(self) -> bool:
        """The arguments hold a bare word JSON does not have (`True`, NaN, Infinity, a float past a double): it goes
        as a JSON string, its text (as a typed value keeps it), so the arguments stay JSON."""
        word, self._arguments.not_json = self._arguments.not_json, ""
        self._send(Delta("", "", self._call_count, None, None, json.dumps(word, ensure_ascii=False)))
        self._drop(len(word))
        return True

    def _call_tail(self, final: bool) -> bool:
        """Skip the rest of the call (`}` and whitespace) up to `</tool_call>`, or a next `<tool_call>`; a `,` right
        after the body's `}` lists another call in the same block. What a tail holds is read the same however it is
        chunked: anything else in it makes it junk, skipped up to a call marker."""
        comma = None if self._listed or self._tail is _TAIL_JUNK else _LISTED_CALL.match(self._buffer)
        if comma and ("}" in comma[0]) is (self._tail is _TAIL_OPEN):  # the body's `}` once, then the `,`
            self._drop(comma.end())
            self._listed = True
        if self._listed:
            self._drop(len(self._buffer) - len(self._buffer.lstrip()))
            if not self._buffer and not final:
                return False  # what follows the `,` decides
            self._listed = False
            if self._buffer.startswith("{"):
                self._call_count += 1
                self._state = _CALL_HEADER
                return True
            self._tail = _TAIL_JUNK
        close = self._find(TOOL_CALL_END)
        reopen = self._find(TOOL_CALL_START)
        if close >= 0 or reopen >= 0:
            self._release_call()  # arguments cut short by a `<` (still held when their first member was cut) end here
        if close >= 0 and (reopen < 0 or close < reopen):
            self._drop(close + len(TOOL_CALL_END))
            self._state = _CONTENT
        elif reopen >= 0:
            self._drop(reopen + len(TOOL_CALL_START))
            self._state = _CALL_HEADER
        else:
            skipped = len(self._buffer) - self._held(final, self._text_call_markers)
            self._read_tail(self._buffer[:skipped])
            self._drop(skipped)
            return False
        self._call_count += 1
        return True

    def _read_tail(self, text: str) -> None:
        """The tail moves on past `text`: the body's `}` closes it, anything but whitespace makes it junk."""
        if self._tail is _TAIL_JUNK:
            return
        rest = text.lstrip()
        if self._tail is _TAIL_OPEN and rest.startswith("}"):
            self._tail = _TAIL_CLOSED
            rest = rest[1:].lstrip()
        if rest:
            self._tail = _TAIL_JUNK

    def _send(self, delta: Delta) -> None:
        """A call's delta: held back with the call, or sent."""
        if self._held_call is not None:
            self._held_call.append(delta)
        else:
            self._out.append(delta)

    def _release_call(self) -> None:
        """The held call's first argument is complete: send what was held, stream the rest."""
        if self._held_call is not None:
            self._out += self._held_call
            self._held_call = None
            self._call_sent = True

    def _take_unheld(self, final: bool, marker: str) -> str:
        """Remove and return the buffer, less a suffix that could still become `marker`."""
        text = self._buffer
        held = self._held(final, () if marker in self._token_markers else (marker,))
        self._drop(len(text) - held)
        return text[: len(text) - held]

    def _emit_reasoning(self, text: str) -> None:
        if out := self._reasoning.push(text):
            self._out.append(Delta("", out))

    def _emit_content(self, text: str) -> None:
        if out := self._content.push(text):
            self._out.append(Delta(out))


_STEPS = {
    _START: HermesParser._start,
    _REASONING: HermesParser._in_reasoning,
    _CONTENT: HermesParser._in_content,
    _CALL_HEADER: HermesParser._call_header,
    _CALL_ARGUMENTS: HermesParser._call_arguments,
    _CALL_TAIL: HermesParser._call_tail,
}
"""Each state's step (looked up once per fed chunk, not built each time)."""
