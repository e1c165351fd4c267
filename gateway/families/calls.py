"""What the token-aware call parsers share: a base that routes pieces and numbers calls, and where a streamed JSON
value ends."""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Callable, Collection, Sequence
from typing import Any

from gateway.families.base import OutputParser
from gateway.families.values import json_keeping_text
from gateway.ids import new_call_id
from gateway.types import Delta, Piece

_IN_STRING = {quote: re.compile(rf"[{quote}\\]") for quote in "\"'"}
_OUTSIDE = {quotes: re.compile(rf"[{{}}\[\]{quotes}]") for quotes in ('"', "\"'")}


class CallParser(OutputParser):
    """A parser that reads structure from control tokens: pieces go to `_control` or `_text`, deltas are collected
    in `_out` and handed out after each feed, calls are numbered in emission order.

    `controls`: the spellings that count as control tokens when they arrive with a token id (None: every piece with
    a token id); any other piece is text.
    """

    controls: Collection[str] | None = None

    def __init__(self, new_id: Callable[[], str] = new_call_id):
        self._new_id = new_id
        self._calls = 0
        self._out: list[Delta] = []

    @property
    def saw_tool_call(self) -> bool:
        return self._calls > 0

    def feed(self, pieces: Sequence[Piece]) -> list[Delta]:
        for piece in pieces:
            if piece.token_id is not None and (self.controls is None or piece.text in self.controls):
                self._control(piece.text)
            elif piece.text:
                self._text(piece.text)
        return self._drain()

    def finish(self) -> list[Delta]:
        self._end()
        return self._drain()

    @abstractmethod
    def _control(self, token: str) -> None:
        """A control token arrived."""

    @abstractmethod
    def _text(self, text: str) -> None:
        """Ordinary text arrived."""

    def _end(self) -> None:
        """The output has ended: drop or flush what is held."""

    def _drain(self) -> list[Delta]:
        out, self._out = self._out, []
        return out

    def _text_delta(self, content: str = "", reasoning: str = "") -> None:
        """Content or reasoning text, joined to the last delta when that holds text of the same kind."""
        last = self._out[-1] if self._out else None
        if last is not None and last.tool_index is None and bool(last.content) == bool(content):
            last.content += content
            last.reasoning += reasoning
        else:
            self._out.append(Delta(content, reasoning))

    def _emit_call(self, name: str, arguments: str) -> None:
        """One whole call: its index, its id, its name and its JSON arguments."""
        self._out.append(
            Delta(tool_index=self._calls, tool_id=self._call_id(name), tool_name=name, tool_arguments=arguments)
        )
        self._calls += 1

    def _call_id(self, name: str) -> str:
        """The id of the next call, of tool `name`: a fresh one (a format whose ids name the call overrides this)."""
        return self._new_id()


class JsonEnd:
    """Finds where one streamed JSON object or array closes, in time linear in the text fed.

    Strings are skipped with a regex (escapes included, also across chunks); only brackets outside
    strings count. Whether the closed value is valid JSON is for `json.loads` to say afterwards.
    `quotes="\"'"` also skips single-quoted strings (Python literals).
    """

    def __init__(self, quotes: str = '"') -> None:
        self.depth = 0
        self._outside = _OUTSIDE[quotes]
        self._quote: str | None = None
        self._escape = False

    def feed(self, text: str) -> int | None:
        """The offset in `text` just past the bracket that closes the value, or None while it is open."""
        at, end = 0, len(text)
        if self._escape and end:
            at, self._escape = 1, False
        while at < end:
            if self._quote is not None:
                found = _IN_STRING[self._quote].search(text, at)
                if found is None:
                    return None
                if found.group() == "\\":
                    if found.end() == end:
                        self._escape = True
                        return None
                    at = found.end() + 1
                else:
                    self._quote, at = None, found.end()
                continue
            found = self._outside.search(text, at)
            if found is None:
                return None
            at = found.end()
            char = found.group()
            if char in "\"'":
                self._quote = char
            elif char in "{[":
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth <= 0:
                    return at
        return None


def is_call_name(name: object) -> bool:
    """Whether `name` can name a call: a string with more than whitespace. Clients dispatch on the name, so a call
    without one is no call; each family then reads it as it reads any other malformed call."""
    return isinstance(name, str) and bool(name.strip())


def json_object(text: str) -> dict[str, Any] | None:
    """`text` as a JSON object, or None when it is not one; a number no JSON parser gives back (NaN, Infinity, past
    a double) is kept as its text (`values.json_keeping_text`), so the arguments re-serialized from it are JSON."""
    try:
        value = json_keeping_text(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
