"""Incremental parsers of Llama tool calls: Llama 3.x JSON objects and Llama 4 pythonic call lists.

Decisions (the gateway's documented behaviour):
* A call is a bracketed value that opens the output (after whitespace) or
  follows a tag token (`<|python_tag|>` for Llama 3, `<|python_start|>` for
  Llama 4, recognised only as control tokens; inside a value every control
  token is its spelling, as the Llama 3 tokenizer writes markers in strings): Llama 3
  `{"name": F, "parameters" | "arguments": {…}}` (more keys, such as
  `"type": "function"`, are ignored), Llama 4 `[f(a=1, b='x'), g()]`. Calls may
  follow one another separated by whitespace or `;`. A Llama 3 call also
  opens mid-text at `{"name": ` (`markers.CALL_TRIGGER`, the trigger on which
  the `auto` grammar constrains a call, and where the peers find one); text
  that could still become that trigger is held back. Text after calls is
  content with the whitespace before it (the `;` between calls is dropped).
* Such a value is held until its brackets close (strings skipped, escapes
  included; linear in its length), then read whole: a call is emitted whole
  (index, id, name, JSON arguments); a value that is no call (`{"a": 1} is a
  dict`, a JSON answer, a call without a name) is content, verbatim. Anything else is content and
  streams as it arrives.
* At the end of the output a value that never closed (max_tokens) is content
  when it opened the output, and dropped after a tag or when the tool choice
  forced calls (their grammar allows nothing else): a call cut short is never
  sent, nor shown as content. Turn-end tokens (`<|eot_id|>`, `<|eom_id|>`, `<|python_end|>`, …)
  are dropped.
* With no tool the model may call (none offered, or `tool_choice: "none"`) a Llama 3 output is content, a
  call-shaped object opening it or after `<|python_tag|>` too (the tag itself is dropped, as vLLM's detokenizer
  skips it): vLLM runs no tool parser then (its `tool_choice_auto` needs `request.tools`), hermes, GLM and Qwen3
  XML read no call either, and no grammar has a call then. (Llama 4's family still reads a call list: family.py.)
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum, auto
from typing import Any

from backends.stop_strings import held_prefix
from gateway.families.calls import CallParser, JsonEnd, is_call_name, json_object
from gateway.families.values import writes_as_json
from gateway.ids import new_call_id
from gateway.types import Delta

from .markers import CALL_TRIGGER

Call = tuple[str, dict[str, Any]]


def json_call(text: str) -> list[Call] | None:
    """A Llama 3 call object, or None when `text` is not one."""
    value = json_object(text)
    if value is None or not is_call_name(value.get("name")):
        return None
    arguments = value.get("parameters", value.get("arguments"))
    return [(value["name"], arguments)] if isinstance(arguments, dict) else None


def pythonic_calls(text: str) -> list[Call] | None:
    """A Llama 4 call list `[f(a=1), g()]` (dotted names, keyword arguments), or None when `text` is not one. A call
    in it whose value is no literal that writes as JSON (bytes, `1e999`) is dropped and its siblings kept, as vLLM's
    parser does; a list with no such sibling is no call list."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(tree, ast.List) or not tree.elts or not all(map(_call_shaped, tree.elts)):
        return None
    return [call for node in tree.elts if (call := _pythonic_call(node)) is not None] or None


def _call_shaped(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and _dotted(node.func) is not None
        and not node.args
        and all(k.arg is not None for k in node.keywords)
    )


def _pythonic_call(node: ast.Call) -> Call | None:
    name = _dotted(node.func)
    try:
        arguments = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None
    return (name, arguments) if writes_as_json(arguments) else None


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


@dataclass(frozen=True)
class CallSyntax:
    """How one Llama generation writes calls: the bracket that opens them, string quotes, the reader, the tag."""

    opener: str
    quotes: str
    read: Callable[[str], list[Call] | None]
    tag: str
    trigger: str | None = None
    """What opens a call in the middle of text (None: calls only open the output or follow the tag)."""


LLAMA3_JSON = CallSyntax("{", '"', json_call, "<|python_tag|>", CALL_TRIGGER)
LLAMA4_PYTHONIC = CallSyntax("[", "\"'", pythonic_calls, "<|python_start|>")
_SEPARATORS = " \t\r\n;"


class Mode(Enum):
    START = auto()  # before the first non-space character of the output, or after a tag
    HOLD = auto()  # inside a bracketed value that may be a call
    AFTER = auto()  # after calls: separators, or another call
    CONTENT = auto()


_START, _HOLD, _AFTER, _CONTENT = Mode.START, Mode.HOLD, Mode.AFTER, Mode.CONTENT
"""The modes as module names, read per token: in Python 3.11 `Enum` class attributes go through its metaclass's
`__getattr__` hook (~500 instructions a read; a module name ~10)."""


class LlamaParser(CallParser):
    """Llama output parser for one choice; the same deltas however the output is chunked."""

    def __init__(
        self,
        syntax: CallSyntax,
        new_id: Callable[[], str] = new_call_id,
        *,
        forced_calls: bool = False,
        tool_calls: bool = True,
    ):
        """`forced_calls`: the grammar allows calls only (a value cut at the end is dropped, as after a tag);
        `tool_calls` false (no tool the model may call): no call at all, the output is content."""
        super().__init__(new_id)
        self._syntax = syntax if tool_calls else replace(syntax, trigger=None)
        self._reads_calls = tool_calls
        self._mode = _START if tool_calls else _CONTENT
        self._tagged = forced_calls
        self._space = ""
        self._value: list[str] = []
        self._closing = JsonEnd(syntax.quotes)
        self._held = ""
        """Content that could still become the mid-text call trigger."""

    def _end(self) -> None:
        self._content(self._held)
        self._held = ""
        if self._mode is _HOLD and not self._tagged:
            self._content(self._space + "".join(self._value))
        elif self._mode is _START and not self._tagged:
            self._content(self._space)
        self._mode, self._value, self._space = _CONTENT, [], ""

    def _control(self, token: str) -> None:
        if self._mode is _HOLD:
            self._text(token)  # inside a value (a JSON string) a control token is its text
            return
        self._content(self._held)  # a token ends what the held text could have become
        self._held = ""
        if token == self._syntax.tag and self._reads_calls:
            self._mode, self._tagged, self._space = _START, True, ""
        # elsewhere turn ends and other control tokens carry no text

    def _text(self, text: str) -> None:
        while text:
            if self._mode is _CONTENT:
                text = self._in_content(text)
                continue
            if self._mode is _HOLD:
                text = self._hold(text)
                continue
            lead = text.lstrip(_SEPARATORS) if self._mode is _AFTER else text.lstrip()
            skipped = text[: len(text) - len(lead)]
            if not lead:
                self._space += skipped
                return
            if lead[0] == self._syntax.opener:
                self._space += skipped
                self._hold_value()
            else:  # no call: the space before is content too (after calls, less the `;` separators)
                space = self._space + skipped
                lead = (space.replace(";", "") if self._mode is _AFTER else space) + lead
                self._mode, self._space = _CONTENT, ""
            text = lead

    def _in_content(self, text: str) -> str:
        """Send content up to a call trigger, holding back what could still become one; the text from the trigger."""
        trigger = self._syntax.trigger
        if trigger is None:
            self._content(text)
            return ""
        text, self._held = self._held + text, ""
        at = text.find(trigger)
        if at >= 0:
            self._content(text[:at])
            self._hold_value()
            return text[at:]
        keep = held_prefix(text, (trigger,))
        self._content(text[: len(text) - keep])
        self._held = text[len(text) - keep :]
        return ""

    def _hold_value(self) -> None:
        self._mode, self._value, self._closing = _HOLD, [], JsonEnd(self._syntax.quotes)

    def _hold(self, text: str) -> str:
        """Feed a held value; the text after it once it closes."""
        end = self._closing.feed(text)
        if end is None:
            self._value.append(text)
            return ""
        self._value.append(text[:end])
        value = "".join(self._value)
        calls = self._syntax.read(value)
        if calls is None:
            self._content(self._space + value)
            self._mode = _CONTENT
        else:
            for name, arguments in calls:
                self._emit_call(name, json.dumps(arguments, ensure_ascii=False))
            self._mode = _AFTER
        self._space, self._value = "", []
        return text[end:]

    def _content(self, text: str) -> None:
        if text:
            self._out.append(Delta(text))
