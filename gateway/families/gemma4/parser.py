"""Incremental parser of Gemma 4 output: `<|channel>thought` reasoning, content, `<|tool_call>call:NAME{…}` calls.

Decisions (the gateway's documented behaviour):
* Structure is read from control tokens only (`<|tool_call>`, `<tool_call|>`,
  `<|"|>`, `<|channel>`, `<channel|>` as token ids); text that spells them is
  text. Between two `<|"|>` a string value is raw text, and every other control
  token there is its spelling.
* `<|channel>` opens reasoning: the channel name `thought` and the newline
  after it are dropped, as are the newlines that end it (held back until
  more reasoning shows they are inside it; dropped at `<channel|>` or at the
  end of the output).
* A call is held from `<|tool_call>` to its `<tool_call|>` and then read
  whole: `call:NAME{key:value,…}` in Gemma's object notation (bare keys, which
  may hold spaces; strings between `<|"|>`; numbers, true, false, null; nested
  objects and arrays, at most MAX_DEPTH deep), emitted as one call with JSON
  arguments; a key with no value (`{a:}`, `{a:,b:1}`) is the empty string, as
  vLLM's parser reads it; commas that separate nothing (`[1,,2]`, `[1,]`,
  `{a:1,,b:2}`) add no item or member, as vLLM's parser skips them (our
  grammar never writes them; a backend without it can). A call that is malformed, or cut short (max_tokens),
  is never sent; one the model closed with `<turn|>` instead of `<tool_call|>` (the turn's end, when the
  backend hands the stop token on) is read as closed, as vLLM's parser reads it.
* Text around calls is content, verbatim.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from gateway.families.calls import CallParser
from gateway.families.values import strict_json
from gateway.ids import new_call_id
from gateway.types import Delta

from .markers import (
    CALL_PREFIX,
    CHANNEL,
    CHANNEL_END,
    CONTROL_TOKENS,
    QUOTE,
    THOUGHT,
    TOOL_CALL,
    TOOL_CALL_END,
    TURN_END,
)

MAX_DEPTH = 64
_CONTROL = frozenset((*CONTROL_TOKENS, TURN_END))
_LABEL = THOUGHT + "\n"


@dataclass(frozen=True)
class Quoted:
    """A string value of a call (the raw text between two `<|"|>`)."""

    text: str


class Malformed(ValueError):
    """A call that is not `call:NAME{…}` in Gemma's object notation."""


def read_call(parts: Sequence[str | Quoted]) -> tuple[str, dict[str, Any]]:
    """The name and arguments of a held call (`parts`: its text and its quoted strings, in order)."""
    reader = _Reader(parts)
    head = reader.until("{")
    if not head.strip().startswith(CALL_PREFIX) or not reader.take("{"):
        raise Malformed("a call is call:NAME{…}")
    name = head.strip()[len(CALL_PREFIX) :].strip()
    arguments = reader.object(0)
    if not name or reader.rest().strip():
        raise Malformed("text after a call's arguments")
    return name, arguments


class _Reader:
    """Recursive descent over a call's characters and quoted strings."""

    def __init__(self, parts: Sequence[str | Quoted]):
        self._items: list[str | Quoted] = [c for p in parts for c in ([p] if isinstance(p, Quoted) else p)]
        self._at = 0

    def peek(self) -> str | Quoted | None:
        while self._at < len(self._items) and self._items[self._at] in (" ", "\n", "\t", "\r"):
            self._at += 1
        return self._items[self._at] if self._at < len(self._items) else None

    def take(self, char: str) -> bool:
        if self.peek() == char:
            self._at += 1
            return True
        return False

    def until(self, stops: str) -> str:
        """Characters up to (not including) one of `stops`; a quoted string there is malformed."""
        out: list[str] = []
        while self._at < len(self._items):
            item = self._items[self._at]
            if isinstance(item, Quoted):
                raise Malformed("a quoted string where a name or a bare value belongs")
            if item in stops:
                break
            out.append(item)
            self._at += 1
        return "".join(out)

    def rest(self) -> str:
        return "".join(i if isinstance(i, str) else i.text for i in self._items[self._at :])

    def skip_empty(self) -> None:
        """Commas that separate nothing (`[1,,2]`, `[1,]`, `{,a:1}`): no item, as vLLM's parser reads them."""
        while self.take(","):
            pass

    def object(self, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while True:
            self.skip_empty()
            if self.take("}"):
                return out
            item = self.peek()
            if isinstance(item, Quoted):
                self._at += 1
                key = item.text
            else:
                key = self.until(":,}").strip()
            if not self.take(":"):  # a key of only whitespace is "" (as vLLM's parser reads it)
                raise Malformed("an object member is key:value")
            out[key] = "" if self.peek() in (",", "}") else self.value(depth + 1)  # `{a:}`: "", as vLLM reads it
            if not self.take(",") and self.peek() != "}":
                raise Malformed("object members are separated by ','")

    def array(self, depth: int) -> list[Any]:
        out: list[Any] = []
        while True:
            self.skip_empty()
            if self.take("]"):
                return out
            out.append(self.value(depth + 1))
            if not self.take(",") and self.peek() != "]":
                raise Malformed("array items are separated by ','")

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise Malformed("nested too deep")
        item = self.peek()
        if isinstance(item, Quoted):
            self._at += 1
            return item.text
        if self.take("{"):
            return self.object(depth)
        if self.take("["):
            return self.array(depth)
        bare = self.until(",}]").strip()
        try:
            return strict_json(bare)
        except ValueError:
            if not bare:
                raise Malformed("a missing value") from None
            return bare


class Mode(Enum):
    CONTENT = auto()
    REASONING = auto()
    CALL = auto()


_CONTENT, _REASONING, _CALL = Mode.CONTENT, Mode.REASONING, Mode.CALL
"""The modes as module names, read per token: in Python 3.11 `Enum` class attributes go through its metaclass's
`__getattr__` hook (~500 instructions a read; a module name ~10)."""


class Gemma4Parser(CallParser):
    """Token-aware Gemma 4 output parser for one choice; the same deltas however the output is chunked."""

    controls = _CONTROL

    def __init__(self, new_id: Callable[[], str] = new_call_id):
        super().__init__(new_id)
        self._mode = _CONTENT
        self._label = ""  # reasoning: the part of the channel name "thought\n" read so far
        self._label_done = False
        self._newlines = ""  # reasoning: trailing newlines held back
        self._call: list[str | Quoted] = []
        self._quoted: list[str] | None = None

    def _end(self) -> None:
        self._mode, self._call, self._quoted = _CONTENT, [], None

    def _control(self, token: str) -> None:
        mode = self._mode
        if mode is _CALL:
            self._call_control(token)
        elif token == TURN_END:
            self._text(token)  # outside a call the end of turn is text, as any other piece
        elif token == CHANNEL and mode is _CONTENT:
            self._mode, self._label, self._label_done, self._newlines = _REASONING, "", False, ""
        elif token == CHANNEL_END and mode is _REASONING:
            self._mode = _CONTENT  # a held channel name or trailing newlines are not reasoning
        elif token == TOOL_CALL:
            if mode is _REASONING:
                self._control(CHANNEL_END)
            self._mode, self._call, self._quoted = _CALL, [], None
        elif mode is _REASONING:
            self._text(token)  # a stray control token inside reasoning is text

    def _call_control(self, token: str) -> None:
        if token == QUOTE:
            if self._quoted is None:
                self._quoted = []
            else:
                self._call.append(Quoted("".join(self._quoted)))
                self._quoted = None
        elif self._quoted is not None:
            self._quoted.append(token)  # inside a string every other control token is text
        elif token in (TOOL_CALL_END, TURN_END):  # a turn that ends after a call's body ends the call
            self._end_call()
        else:
            self._call.append(token)

    def _end_call(self) -> None:
        self._mode = _CONTENT
        try:
            name, arguments = read_call(self._call)
        except Malformed:
            return
        finally:
            self._call = []
        arguments_json = json.dumps(arguments, ensure_ascii=False)
        self._out.append(
            Delta(tool_index=self._calls, tool_id=self._new_id(), tool_name=name, tool_arguments=arguments_json)
        )
        self._calls += 1

    def _text(self, text: str) -> None:
        if self._mode is _CONTENT:
            self._out.append(Delta(text))
        elif self._mode is _CALL:
            (self._quoted if self._quoted is not None else self._call).append(text)
        else:
            self._reasoning(text)

    def _reasoning(self, text: str) -> None:
        if not self._label_done:
            held = self._label + text
            if _LABEL.startswith(held):
                self._label = held
                return
            self._label, self._label_done = "", True
            text = held.removeprefix(_LABEL)
        text = self._newlines + text
        body = text.rstrip("\n")
        self._newlines = text[len(body) :]
        if body:
            self._out.append(Delta("", body))
