"""Incremental parser of Mistral output: `[THINK]` reasoning, content, `[TOOL_CALLS]` calls (every version).

Decisions (the gateway's documented behaviour):
* Structure is read from control tokens only (`[TOOL_CALLS]`, `[ARGS]`,
  `[CALL_ID]`, `[THINK]`, `[/THINK]` as token ids); text that spells them is
  text. Inside reasoning (until `[/THINK]`) and inside a call's JSON every
  control token is its spelling, as Mistral's tokenizers write markers there.
* After `[TOOL_CALLS]`: a JSON array (`[{"name", "arguments"}, …]`, tokenizer
  v3) or `NAME[ARGS]{…}` (v11+; `NAME[CALL_ID]ID[ARGS]{…}` also taken, the id
  dropped). The JSON is held until its brackets close, then the calls are
  emitted whole; a call cut short (max_tokens) or a name that never gets its
  `[ARGS]` is never sent; a name longer than MAX_NAME characters is malformed.
  Text after `[TOOL_CALLS]` that can begin neither (a character no tool name
  holds, outside a leading `[`: `[TOOL_CALLS] not json at all`) is content from
  there, as soon as that is certain, as vLLM's pre-v11 parser shows it.
* Magistral 2506 writes reasoning as text, `<think>…</think>`, at the start
  of the output (`text_think=True`); only a `</think>` split across pieces is
  held back.
* Text after a call's JSON is content.
* Call ids are 9 alphanumeric characters (`call_ids`), the shape Mistral's templates take back in history.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from enum import Enum, auto
from typing import Any

from gateway.families.calls import CallParser, JsonEnd, is_call_name, json_object
from gateway.families.values import json_keeping_text
from gateway.types import Delta

from .call_ids import new_mistral_call_id
from .markers import ARGS, CALL_ID, TEXT_THINK, TEXT_THINK_END, THINK, THINK_END, TOOL_CALLS

MAX_NAME = 256
CALL_NAME = re.compile(r"[A-Za-z0-9_.:-]+")
"""What a tool name may hold (the gateway's tool names, OpenAI's and Anthropic's): text after `[TOOL_CALLS]` with any
other character can begin neither a v3 array nor a v11 name."""


class Mode(Enum):
    START = auto()  # text_think: the output may open with `<think>`
    CONTENT = auto()
    REASONING = auto()
    TEXT_REASONING = auto()
    NAME = auto()  # after [TOOL_CALLS]: a name, or a v3 JSON array
    CALL_ID = auto()
    ARGUMENTS = auto()  # a held JSON object (v11+) or array (v3)
    DROP = auto()  # a malformed call, until the next [TOOL_CALLS]


_START, _CONTENT, _REASONING, _TEXT_REASONING = Mode.START, Mode.CONTENT, Mode.REASONING, Mode.TEXT_REASONING
_NAME, _CALL_ID, _ARGUMENTS, _DROP = Mode.NAME, Mode.CALL_ID, Mode.ARGUMENTS, Mode.DROP
"""The modes as module names, read per token: in Python 3.11 `Enum` class attributes go through its metaclass's
`__getattr__` hook (~500 instructions a read; a module name ~10)."""


def array_calls(text: str) -> list[tuple[str, dict[str, Any]]] | None:
    """The calls of a v3 `[{"name": …, "arguments": {…}}, …]` array, or None when it is not one."""
    try:
        value = json_keeping_text(text)
    except ValueError:
        return None
    if not isinstance(value, list):
        return None
    calls = [(c.get("name"), c.get("arguments", {})) for c in value if isinstance(c, dict)]
    if len(calls) != len(value) or not all(is_call_name(n) and isinstance(a, dict) for n, a in calls):
        return None
    return calls


class MistralParser(CallParser):
    """Token-aware Mistral output parser for one choice; the same deltas however the output is chunked."""

    def __init__(self, text_think: bool = False, new_id: Callable[[], str] = new_mistral_call_id):
        super().__init__(new_id)
        self._mode = _START if text_think else _CONTENT
        self._held = ""  # START: a prefix of `<think>`; TEXT_REASONING: a prefix of `</think>`
        self._name: list[str] = []
        self._json: list[str] = []
        self._closing = JsonEnd()
        self._array = False

    def _end(self) -> None:
        if self._mode is _START:
            self._emit_text(_CONTENT, self._held)
        elif self._mode is _TEXT_REASONING:
            self._emit_text(_REASONING, self._held)
        self._mode, self._held = _DROP, ""

    def _control(self, token: str) -> None:
        mode = self._mode
        if mode is _ARGUMENTS or (mode in (_REASONING, _TEXT_REASONING) and token != THINK_END):
            self._text(token)  # a marker inside reasoning or JSON is text
        elif token == TOOL_CALLS:
            self._flush_held()
            self._mode, self._name = _NAME, []
        elif token == THINK and mode in (_START, _CONTENT):
            self._flush_held()
            self._mode = _REASONING
        elif token == THINK_END and mode in (_REASONING, _TEXT_REASONING):
            self._held = ""
            self._mode = _CONTENT
        elif token == CALL_ID and mode is _NAME:
            self._mode = _CALL_ID
        elif token == ARGS and mode in (_NAME, _CALL_ID):
            self._open_json(array=False)
        # other control tokens (</s>, [INST], …) carry no text

    def _text(self, text: str) -> None:
        mode = self._mode
        if mode is _CONTENT:
            self._emit_text(_CONTENT, text)
        elif mode is _REASONING:
            self._emit_text(_REASONING, text)
        elif mode is _START:
            self._start(text)
        elif mode is _TEXT_REASONING:
            self._text_reasoning(text)
        elif mode is _NAME:
            if not "".join(self._name).strip() and text.lstrip().startswith("["):
                self._open_json(array=True)
                self._arguments(text.lstrip())
                return
            self._name.append(text)
            name = "".join(self._name).strip()
            if name and not CALL_NAME.fullmatch(name):
                self._mode = _CONTENT  # no call can follow: the text is content, as vLLM's pre-v11 parser has it
                self._emit_text(_CONTENT, "".join(self._name))
            elif sum(map(len, self._name)) > MAX_NAME:
                self._mode = _DROP
        elif mode is _ARGUMENTS:
            self._arguments(text)

    def _start(self, text: str) -> None:
        held = self._held + text
        if TEXT_THINK.startswith(held):
            self._held = held
            return
        self._held = ""
        if held.startswith(TEXT_THINK):
            self._mode = _TEXT_REASONING
            self._text_reasoning(held[len(TEXT_THINK) :])
        else:
            self._mode = _CONTENT
            self._emit_text(_CONTENT, held)

    def _text_reasoning(self, text: str) -> None:
        held = self._held + text
        end = held.find(TEXT_THINK_END)
        if end != -1:
            self._held, self._mode = "", _CONTENT
            self._emit_text(_REASONING, held[:end])
            self._emit_text(_CONTENT, held[end + len(TEXT_THINK_END) :])
            return
        keep = next((n for n in range(len(TEXT_THINK_END) - 1, 0, -1) if held.endswith(TEXT_THINK_END[:n])), 0)
        self._held = held[len(held) - keep :] if keep else ""
        self._emit_text(_REASONING, held[: len(held) - keep])

    def _flush_held(self) -> None:
        if self._mode is _START:
            self._emit_text(_CONTENT, self._held)
        elif self._mode is _TEXT_REASONING:
            self._emit_text(_REASONING, self._held)
        self._held = ""

    def _open_json(self, array: bool) -> None:
        self._mode, self._json, self._closing, self._array = _ARGUMENTS, [], JsonEnd(), array

    def _arguments(self, text: str) -> None:
        end = self._closing.feed(text)
        if end is None:
            self._json.append(text)
            return
        self._json.append(text[:end])
        body = "".join(self._json).strip()
        if self._array:
            for name, arguments in array_calls(body) or ():
                self._emit_call(name, json.dumps(arguments, ensure_ascii=False))
        elif (value := json_object(body)) is not None and "".join(self._name).strip():
            self._emit_call("".join(self._name).strip(), json.dumps(value, ensure_ascii=False))
        self._mode, self._json = _CONTENT, []
        self._emit_text(_CONTENT, text[end:])

    def _emit_text(self, mode: Mode, text: str) -> None:
        if not text:
            return
        self._out.append(Delta("", text) if mode is _REASONING else Delta(text))
