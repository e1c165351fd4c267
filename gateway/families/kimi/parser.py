"""Incremental parser of Kimi K3 XTML output: think → reasoning, response → content, tools → calls.

(Kimi K2 output is `gateway.families.token_sections.SectionParser` with `split_k2_call`.)

Decisions (the gateway's documented behaviour):
* Structure is read from token ids only: `<|open|>`, `<|close|>` and `<|sep|>`
  are markers when they arrive as their control tokens (a Piece with
  `token_id`). Text that merely spells them (ordinary tokens) is content,
  reasoning or argument text like any other. Nothing is held back for a
  possible partial marker, so content streams token by token.
* The prompt leaves a channel open (`think` or `response`); the parser starts
  there. Reasoning ends at `<|close|>think<|sep|>` or at any opening tag, so a
  model that skips the think close still gets its answer out of reasoning.
  Text between channels is content; text between calls is dropped.
* A call is announced (index by emission order, id `call_<hex>`, name) once
  its first argument is complete or it closes; the arguments JSON then
  streams: string values (raw XTML bodies) as they arrive, typed values
  (`number`, `boolean`, `null`, `array`, `object`: JSON bodies) when their
  argument closes, a malformed body falling back to the raw string. A
  repeated key is skipped, so arguments stay valid JSON. The model's `index`
  attribute is ignored.
* At the end of the output a call whose arguments are all complete is
  closed; a call cut inside its first argument was never announced and is
  dropped; arguments cut later stay as sent (a stream cannot take them back),
  as OpenAI does on finish_reason "length".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.families.calls import CallParser, is_call_name
from gateway.families.streams import json_fragment
from gateway.families.token_sections import CallSplitter, SectionMarkers, SectionParser
from gateway.families.values import strict_json
from gateway.ids import new_call_id
from gateway.types import Delta

from .markers import CLOSE, MARKERS, OPEN, SEP, unescape_attr

_ATTRIBUTE = re.compile(r'([\w-]+)="([^"]*)"')
_CHANNELS = frozenset({"think", "response", "tools", "message"})


_K2_CALL_ID = re.compile(r"\s*(?:functions\.)?(.*?)(?::\d+)?\s*", re.DOTALL)


def split_k2_call(
    header: str, body: str, schemas: Mapping[str, Mapping[str, Any]] | None = None
) -> tuple[str, str] | None:
    """K2: the call id `functions.NAME:IDX` (prefix and index optional) names the tool; the body is its JSON. A bare
    counter id (`0`) names no tool: it is the request's one tool, or the one whose parameters (`schemas`, by tool
    name) hold every argument key, as vLLM infers it; with no such single tool the call is malformed (None)."""
    match = _K2_CALL_ID.fullmatch(header)
    if match is None:
        return None
    name = match.group(1)
    if name.isdigit() and name not in (schemas or {}):
        name = _tool_taking(body, schemas or {})
    return None if name is None else (name, body)


class K2SectionParser(SectionParser):
    """K2's sections, each call's id `functions.NAME:N` as K2 writes it, N counting the conversation's calls from
    `first` (SGLang's and vLLM's ids for K2): a client that sends the call back in its history has K2's template write
    the header the model wrote (`<|tool_call_begin|>functions.NAME:N`), where a random id names no tool."""

    def __init__(self, markers: SectionMarkers, split_call: CallSplitter, in_reasoning: bool, first: int):
        super().__init__(markers, split_call, in_reasoning)
        self._first = first

    def _call_id(self, name: str) -> str:
        return f"functions.{name}:{self._first + self._calls}"


def _tool_taking(body: str, schemas: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The one tool that can take the JSON arguments `body`, if exactly one can."""
    if len(schemas) == 1:
        return next(iter(schemas))
    try:
        arguments = strict_json(body)
    except ValueError:
        return None
    if not isinstance(arguments, dict):
        return None
    fits = [name for name, properties in schemas.items() if arguments.keys() <= properties.keys()]
    return fits[0] if len(fits) == 1 else None


def typed_value(raw: str) -> object:
    """A typed argument body: its JSON value, or the raw text when it is not strict JSON."""
    try:
        return strict_json(raw)
    except ValueError:
        return raw


def parse_tag(header: str) -> tuple[str, dict[str, str]]:
    """The name and unescaped attributes of a tag header such as `call tool="f" index="1"`."""
    name, _, rest = header.strip().partition(" ")
    return name.strip(), {k: unescape_attr(v) for k, v in _ATTRIBUTE.findall(rest)}


@dataclass
class _Call:
    name: str
    keys: set[str] = field(default_factory=set)
    pending: list[str] = field(default_factory=list)
    index: int | None = None


@dataclass
class _Argument:
    is_string: bool
    skip: bool
    raw: list[str] = field(default_factory=list)


class KimiK3Parser(CallParser):
    """Token-aware K3 output parser for one choice; the same deltas however the output is chunked."""

    controls = MARKERS

    def __init__(self, channel: str = "think", new_id: Callable[[], str] = new_call_id):
        super().__init__(new_id)
        self._where = channel
        self._tag: list[str] | None = None
        self._tag_kind = OPEN
        self._call: _Call | None = None
        self._argument: _Argument | None = None

    def _end(self) -> None:
        call = self._call
        if call is not None and call.index is not None and self._argument is None:
            self._write(call, "}" if call.keys else "{}")
        self._call = self._argument = self._tag = None

    def _text(self, text: str) -> None:
        if self._tag is not None:
            self._tag.append(text)
            return
        where = self._where
        if where == "argument":  # first: most tokens of a call-heavy output are argument text
            argument = self._argument
            if argument is None or self._call is None or argument.skip:
                return
            if argument.is_string:
                self._write(self._call, json_fragment(text))
            else:
                argument.raw.append(text)
        elif where == "think":
            self._text_delta(reasoning=text)
        elif where == "response" or where == "message":
            self._text_delta(content=text)

    def _control(self, marker: str) -> None:
        if marker != SEP:
            self._tag, self._tag_kind = [], marker  # an unfinished tag before it is dropped
            return
        if self._tag is None:
            return  # a stray separator is structure, never text
        name, attributes = parse_tag("".join(self._tag))
        self._tag = None
        if self._tag_kind == OPEN:
            self._open(name, attributes)
        elif self._tag_kind == CLOSE:
            self._close(name)

    def _open(self, name: str, attributes: dict[str, str]) -> None:
        if name in _CHANNELS:
            self._end_call()
            self._where = name
        elif name == "call":
            self._end_call()
            self._call = _Call(attributes.get("tool", ""))
            self._where = "call"
        elif name == "argument" and self._call is not None:
            self._end_argument()
            self._start_argument(self._call, attributes.get("key", ""), attributes.get("type", "string"))
            self._where = "argument"

    def _close(self, name: str) -> None:
        if name == "argument":
            self._end_argument()
            if self._call is not None:
                self._where = "call"
        elif name == "call":
            self._end_call()
            self._where = "tools"
        elif name in _CHANNELS:
            self._end_call()
            self._where = "done" if name == "message" else "message"

    def _start_argument(self, call: _Call, key: str, kind: str) -> None:
        argument = _Argument(is_string=kind == "string", skip=key in call.keys)
        self._argument = argument
        if argument.skip:
            return
        self._write(call, ("," if call.keys else "{") + json.dumps(key, ensure_ascii=False) + ":")
        call.keys.add(key)
        if argument.is_string:
            self._write(call, '"')

    def _end_argument(self) -> None:
        argument, call = self._argument, self._call
        self._argument = None
        if argument is None or call is None or argument.skip:
            return
        if argument.is_string:
            self._write(call, '"')
        else:
            self._write(call, json.dumps(typed_value("".join(argument.raw)), ensure_ascii=False))
        if call.index is None:
            self._announce(call)

    def _end_call(self) -> None:
        self._end_argument()
        call, self._call = self._call, None
        if call is None:
            return
        self._write(call, "}" if call.keys else "{}")
        if call.index is None:
            self._announce(call)

    def _announce(self, call: _Call) -> None:
        if not is_call_name(call.name):
            return  # a call without a tool name is not a call
        call.index = self._calls
        arguments, call.pending = "".join(call.pending), []
        self._emit_call(call.name, arguments)

    def _write(self, call: _Call, text: str) -> None:
        if call.index is None:
            call.pending.append(text)
            return
        last = self._out[-1] if self._out else None
        if last is not None and last.tool_index == call.index:
            last.tool_arguments += text
        else:
            # positional: keywords make the call build a dict (~0.8 K instructions; one such delta a value token)
            self._out.append(Delta("", "", call.index, None, None, text))
