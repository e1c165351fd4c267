"""Incremental parsers of DeepSeek output: DSML tool calls (V3.2 / V4 / V4.1) and V3 / V3.1 tool-call sections.

V3 and V3.1 use `gateway.families.token_sections.SectionParser` with their own
call layouts (`split_v3_call`, `split_v31_call`). The rest of this note is the
DSML parser's.

Decisions (the gateway's documented behaviour):
* Markers count only as tokens (see lexer.py): `</think>` ends the reasoning
  when the prompt opened it, or when the output opens with `<think>` (after
  whitespace at most; as every family's parser reads a leading think block); a calls block starts at
  the dialect's own calls tag only (V4.1 `<｜DSML｜ calls>`, V4 `<｜DSML｜tool_calls>`, V3.2
  `<｜DSML｜function_calls>`: another version's block is text, as vLLM's V4 parser takes it), which also
  ends reasoning (the grammar keeps the DSML token out of reasoning; vLLM's V4 reasoning parser ends it there
  too), and the `</think>` the model may still write after such a block is dropped. Text spelling a marker is
  plain text.
* Reasoning streams as it arrives; output cut before `</think>` stays reasoning.
* Whitespace before a calls block is dropped (the encoder writes `\\n\\n`), so
  content holds back trailing whitespace until more text follows.
* Inside a value only `</｜DSML｜ parameter>` ends it; any other tag or token
  there is value text. A declared parameter's value is typed by its schema
  (`values.convert`, as the peers' schema-aware fixers: `string="true"` 42 for
  an integer is 42, `string="false"` null for a string is "null", a
  `string="false"` JSON string is that string wherever the schema takes one,
  the first argument or a later, streamed one; the grammar
  writes `string="true"` exactly for string parameters, so under it the two
  agree); otherwise `string="false"` values are JSON (re-serialized; not valid
  JSON → the raw text as a string), other values are raw strings.
* A call is announced (dense index, `call_…` id, name) when its first argument
  is complete or its invoke closes, so output cut inside a call's first
  argument yields no call; an invoke without a name is no call (dropped whole).
  An invoke with no parameter whose text is a JSON object takes that object as
  its arguments (V3.2 sometimes writes them so, as SGLang's V3.2 detector reads
  them; the grammar writes parameters only).
  From then on string values stream as they arrive;
  the argument fragments concatenate to the call's JSON arguments. A call
  cut after its announcement stays as sent, as OpenAI does on "length".
* With a forced tool choice (`required` or a named tool) the grammar allows
  calls only, so a calls tag cut off by the end of the output (`<｜DSML｜ cal`)
  is dropped with the whitespace before it, never markup in content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import auto
from typing import Any

from gateway.families.base import OutputParser, ParserState
from gateway.families.calls import is_call_name, json_object
from gateway.families.streams import ReasoningCut
from gateway.families.values import argument_types, convert, is_plain_string, strict_json
from gateway.ids import new_call_id
from gateway.types import Delta, Piece

from .lexer import Event, Lexer, Tag, Token
from .markers import THINK_END, THINK_START, V41, Dialect

_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\u2028\u2029]')


class _Mode(ParserState):
    REASONING = auto()
    CONTENT = auto()
    CALLS = auto()
    INVOKE = auto()
    VALUE = auto()


_REASONING, _CONTENT, _CALLS, _INVOKE, _VALUE = _Mode.REASONING, _Mode.CONTENT, _Mode.CALLS, _Mode.INVOKE, _Mode.VALUE
"""The modes as module names, read per token: in Python 3.11 `Enum` class attributes go through its metaclass's
`__getattr__` hook (~500 instructions a read; a module name ~10)."""


_FENCED = re.compile(r"([^\n]*)\n```(?:json)?[ \t]*\n(.*?)\s*```\s*", re.DOTALL)


def split_v3_call(header: str, body: str) -> tuple[str, str] | None:
    """V3: `function<｜tool▁sep｜>NAME` then the arguments fenced as ```json; None when the fence is missing."""
    match = _FENCED.fullmatch(body)
    return (match.group(1).strip(), match.group(2)) if match else None


def split_v31_call(header: str, body: str) -> tuple[str, str]:
    """V3.1: `NAME<｜tool▁sep｜>` then the bare JSON arguments."""
    return header.strip(), body


@dataclass
class _Call:
    name: str
    index: int | None = None
    """Set once the call is announced."""
    arguments: int = 0
    body: list[str] = field(default_factory=list)
    """The invoke's text before any parameter (a JSON arguments object, in V3.2's other form)."""


@dataclass
class _Value:
    key: str
    is_json: bool
    types: frozenset[str]
    """The JSON types the parameter's schema allows (none: undeclared)."""
    text: list[str] = field(default_factory=list)
    streaming: bool = False


class DsmlParser(OutputParser):
    """One choice's parser; `in_reasoning` says the prompt ended inside `<think>`."""

    def __init__(
        self,
        in_reasoning: bool,
        forced_calls: bool = False,
        dialect: Dialect = V41,
        schemas: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        """`forced_calls`: the answer is calls only (a tag cut off at the end is dropped, not content); `dialect`: the
        DSML version whose calls tag opens a block; `schemas`: the request's tools' parameter schemas, by tool name."""
        self._forced_calls = forced_calls
        self._schemas = schemas or {}
        self._calls_name = dialect.calls.strip()
        self._mode = _REASONING if in_reasoning else _CONTENT
        self._lexer = Lexer()
        self._out: list[Delta] = []
        self._held_space = ""
        self._calls = 0
        self._call: _Call | None = None
        self._value: _Value | None = None
        self._reasoning_started = False
        self._leading = not in_reasoning
        """Content so far is whitespace at most: a `<think>` token here opens reasoning."""
        self._cut = ReasoningCut()
        self._handlers = {
            _REASONING: self._in_reasoning,
            _CONTENT: self._in_content,
            _CALLS: self._in_calls,
            _INVOKE: self._in_invoke,
            _VALUE: self._in_value,
        }

    @property
    def saw_tool_call(self) -> bool:
        return self._calls > 0

    def feed(self, pieces: Sequence[Piece]) -> list[Delta]:
        for piece in pieces:
            for event in self._lexer.feed(piece):
                self._handlers[self._mode](event)
        return self._take()

    def finish(self) -> list[Delta]:
        if self._forced_calls and self._mode is _CONTENT:  # what the lexer holds is a cut tag
            self._held_space = ""
        else:
            for event in self._lexer.finish():
                self._handlers[self._mode](event)
        if self._mode is _CONTENT and self._held_space:
            self._content(self._held_space)
            self._held_space = ""
        return self._take()

    def _take(self) -> list[Delta]:
        out, self._out = self._out, []
        return out if len(out) < 2 else _merged(out)

    def _in_reasoning(self, event: Event) -> None:
        if type(event) is Token and event.text == THINK_END:
            self._mode = _CONTENT
        elif type(event) is Token and event.text == THINK_START and not self._reasoning_started:
            return
        elif type(event) is Tag and not event.closing and event.name == self._calls_name:
            self._cut.cut()
            self._mode = _CONTENT
            self._in_content(event)
        else:
            text = _spelling(event)
            self._reasoning_started = self._reasoning_started or not text.isspace()
            self._out.append(Delta("", text))

    def _in_content(self, event: Event) -> None:
        if self._leading:
            if type(event) is Token and event.text == THINK_START:
                self._held_space = ""
                self._leading = False
                self._mode = _REASONING
                return
            self._leading = type(event) is str and not event.strip()
        elif self._cut.takes_end(type(event) is Token and event.text == THINK_END):
            return
        if type(event) is Tag and not event.closing and event.name == self._calls_name:
            self._held_space = ""
            self._mode = _CALLS
            return
        text = self._held_space + _spelling(event)
        body = text.rstrip()
        self._held_space = text[len(body) :]
        self._content(body)

    def _content(self, text: str) -> None:
        if text:
            self._out.append(Delta(text))

    def _in_calls(self, event: Event) -> None:
        if type(event) is not Tag:
            return
        if event.closing and event.name == self._calls_name:
            self._mode = _CONTENT
        elif not event.closing and event.name == "invoke":
            self._call = _Call(_attributes(event).get("name", ""))
            self._mode = _INVOKE
            if event.self_closing:
                self._end_call()

    def _in_invoke(self, event: Event) -> None:
        if type(event) is str and self._call.arguments == 0:
            self._call.body.append(event)
        if type(event) is not Tag:
            return
        if not event.closing and event.name == "parameter":
            attributes = _attributes(event)
            key = attributes.get("name", "")
            types = argument_types(self._schemas, self._call.name, key)
            self._value = value = _Value(key, attributes.get("string") == "false", types)
            self._mode = _VALUE
            if self._call.index is not None and not value.is_json and (is_plain_string(types) or not types):
                self._value.streaming = True
                self._arguments(self._key_prefix(self._value.key) + '"')
        elif event.closing and event.name == "invoke":
            self._end_call()
        elif event.closing and event.name == self._calls_name:
            self._end_call()
            self._mode = _CONTENT

    def _in_value(self, event: Event) -> None:
        value = self._value
        if type(event) is str:
            text = event  # most events: a token of the value
        elif type(event) is Tag and event.closing and event.name == "parameter":
            self._end_value()
            return
        else:
            text = _spelling(event)
        if value.streaming:
            self._arguments(_json(text)[1:-1] if _NEEDS_ESCAPE.search(text) else text)  # inside a JSON string
        else:
            value.text.append(text)

    def _end_value(self) -> None:
        value, call = self._value, self._call
        self._value = None
        self._mode = _INVOKE
        if value.streaming:
            self._arguments('"')
        else:
            fragment = self._key_prefix(value.key) + _json(_typed("".join(value.text), value.is_json, value.types))
            if call.index is None:
                self._announce(fragment)
            else:
                self._arguments(fragment)
        call.arguments += 1

    def _end_call(self) -> None:
        call = self._call
        if call.index is None:
            self._announce(_json(json_object("".join(call.body)) or {}))
        else:
            self._arguments("}")
        self._call = None
        self._mode = _CALLS

    def _key_prefix(self, key: str) -> str:
        return ("{" if self._call.arguments == 0 else ", ") + _json(key) + ": "

    def _announce(self, arguments: str) -> None:
        """Send the call with its arguments so far; a call without a name is no call, dropped whole."""
        call = self._call
        if not is_call_name(call.name):
            return
        call.index = self._calls
        self._calls += 1
        self._out.append(
            Delta(tool_index=call.index, tool_id=new_call_id(), tool_name=call.name, tool_arguments=arguments)
        )

    def _arguments(self, fragment: str) -> None:
        if not fragment:
            return
        last = self._out[-1] if self._out else None
        if last is not None and last.tool_id is None and last.tool_index == self._call.index:
            last.tool_arguments += fragment
        else:
            # positional: keywords make the call build a dict (~0.8 K instructions; one such delta a value token)
            self._out.append(Delta("", "", self._call.index, None, None, fragment))


def _spelling(event: Event) -> str:
    if type(event) is str:
        return event
    return event.raw if type(event) is Tag else event.text


def _attributes(tag: Tag) -> dict[str, str]:
    return dict(_ATTRIBUTE.findall(tag.body))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _typed(text: str, is_json: bool, types: frozenset[str]) -> Any:
    """A value: by the parameter's schema `types` when it has them (a `string="false"` JSON string is that string
    wherever the schema takes a string), else `string="false"` text as JSON, else (or not JSON) the text."""
    if types and not is_plain_string(types):
        if is_json and "string" in types and isinstance(decoded := _json_or_none(text), str):
            return decoded
        return convert(text.strip() if is_json else text, types)  # JSON's whitespace is no string's
    if is_json:
        try:
            value = strict_json(text)
        except ValueError:
            return text
        return value if not types or isinstance(value, str) else text
    return text


def _json_or_none(text: str) -> Any:
    try:
        return strict_json(text)
    except ValueError:
        return None


def _merged(deltas: list[Delta]) -> list[Delta]:
    """Adjacent content, reasoning or same-call argument deltas joined into one."""
    out: list[Delta] = []
    for delta in deltas:
        last = out[-1] if out else None
        if last is not None and _joinable(last, delta):
            last.content += delta.content
            last.reasoning += delta.reasoning
            last.tool_arguments += delta.tool_arguments
        else:
            out.append(delta)
    return out


def _joinable(a: Delta, b: Delta) -> bool:
    if b.tool_id is not None:
        return False
    if a.tool_index is not None or b.tool_index is not None:
        return a.tool_index == b.tool_index
    return bool(a.content) == bool(b.content) and bool(a.reasoning) == bool(b.reasoning)
