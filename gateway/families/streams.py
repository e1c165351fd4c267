"""What the families' streaming parsers share: trimmed text streams, typed calls held until sure, and a base for
parsers whose calls stream through them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from enum import Enum
from json.encoder import encode_basestring
from typing import Any, ClassVar

from gateway.families.base import OutputParser
from gateway.families.calls import is_call_name
from gateway.families.values import convert, is_plain_string, tool_schemas
from gateway.ids import new_call_id
from gateway.types import Delta


def json_fragment(text: str) -> str:
    """`text` escaped as the inside of a JSON string (fragments concatenate to the escaped whole); `json`'s C
    escaper called directly (what `JSONEncoder(ensure_ascii=False).encode` runs for a string, less its Python frame:
    once per streamed argument token)."""
    return encode_basestring(text)[1:-1]


class Trimmed:
    """A text stream without leading and trailing whitespace: trailing whitespace waits for more text."""

    def __init__(self, *, keep_leading: bool = False) -> None:
        """`keep_leading`: the text continues earlier text (a prefill), so its leading whitespace is kept."""
        self._started = keep_leading
        self._pending = ""

    def push(self, text: str) -> str:
        """What of `text` can be sent now."""
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        body = text.rstrip()
        if not body:
            self._pending += text
            return ""
        out, self._pending = self._pending + body, text[len(body) :]
        return out

    @property
    def started(self) -> bool:
        """Whether any text other than leading whitespace came."""
        return self._started

    def flush(self) -> str:
        """The trailing whitespace held back so far."""
        out, self._pending = self._pending, ""
        return out


class ReasoningCut:
    """The rule every family's parser keeps: a tool call's opening token inside reasoning ends the reasoning and opens
    the call (the grammar keeps that token out of reasoning; vLLM's Qwen3 and DeepSeek V4 reasoning parsers end it
    there too), and the `</think>` the model may still write after those calls closes nothing: the first one met
    after the cut is dropped."""

    __slots__ = ("awaits_end",)

    def __init__(self) -> None:
        self.awaits_end = False
        """A call token ended reasoning and no `</think>` came since."""

    def cut(self, *, end_token: bool = True) -> None:
        """A call token ended reasoning; `end_token`: `</think>` is an added token (else its spelling is text)."""
        self.awaits_end = end_token

    def takes_end(self, is_think_end: bool) -> bool:
        """Whether a `</think>` met after the cut is the one the cut left behind (dropped; a later one is not)."""
        if is_think_end and self.awaits_end:
            self.awaits_end = False
            return True
        return False


class CallOutput:
    """The deltas a parser sends: trimmed content and reasoning, and tool calls whose arguments are written
    one typed argument at a time. A call is held back until its first argument (or the call) is complete,
    then sent with its arguments so far and streamed; a call still held when the output ends is dropped, and so
    is a call without a name (`is_call_name`), whole.
    """

    def __init__(self) -> None:
        self.deltas: list[Delta] = []
        self.sent_call = False
        self._reasoning = Trimmed()
        self._content = Trimmed()
        self._calls = 0
        self._held: list[Delta] | None = None
        self._nameless = False
        """The current call has no name: its deltas go nowhere and it takes no index."""
        self._arguments = 0
        self._types: frozenset[str] = frozenset()
        self._plain = False
        """The current argument is a plain string (`is_plain_string` of its types): its text streams."""
        self._value = ""

    def take(self) -> list[Delta]:
        """The deltas so far, handed over once."""
        out, self.deltas = self.deltas, []
        return out

    @property
    def reasoning_started(self) -> bool:
        return self._reasoning.started

    def reasoning(self, text: str) -> None:
        if out := self._reasoning.push(text):
            self.deltas.append(Delta("", out))

    def content(self, text: str) -> None:
        if out := self._content.push(text):
            self.deltas.append(Delta(out))

    def open_call(self, name: str) -> None:
        self._nameless = not is_call_name(name)
        self._held = None if self._nameless else [Delta(tool_index=self._calls, tool_id=new_call_id(), tool_name=name)]
        self._arguments = 0

    def start_argument(self, key: str, types: frozenset[str]) -> None:
        """An argument of JSON `types` begins: a plain string streams, any other value waits for its end."""
        self._types, self._value, self._plain = types, "", is_plain_string(types)
        quote = '"' if self._plain else ""
        self._send(("{" if self._arguments == 0 else ", ") + json.dumps(key, ensure_ascii=False) + ": " + quote)
        self._arguments += 1

    def argument_text(self, text: str) -> None:
        if not text:
            return
        if self._plain:
            self._send(json_fragment(text))
        else:
            self._value += text

    def end_argument(self) -> None:
        value = convert(self._value, self._types)
        self._send('"' if self._plain else json.dumps(value, ensure_ascii=False))
        self._release()

    def close_call(self) -> None:
        self._send("{}" if self._arguments == 0 else "}")
        self._release()
        if not self._nameless:
            self._calls += 1
        self._nameless = False

    def drop_held_call(self) -> None:
        """The output ended: a call still held back is no call."""
        self._held = None

    @property
    def streaming_call(self) -> bool:
        """Whether the current call was already sent (its later arguments stream)."""
        return self._held is None and self.sent_call and not self._nameless

    def _send(self, fragment: str) -> None:
        if self._nameless:
            return
        delta = Delta("", "", self._calls, None, None, fragment)
        (self._held if self._held is not None else self.deltas).append(delta)

    def _release(self) -> None:
        if self._held is not None:
            self.deltas += self._held
            self._held = None
            self.sent_call = True


class StreamedCallParser(OutputParser):
    """A parser whose output goes through a `CallOutput`, argument values typed by the request's tool schemas
    (GLM, Qwen3 XML). `states` is the subclass's state enum: it starts at `START`, or at `REASONING` when the
    prompt opened a think block; `think` is the family's (`<think>`, `</think>`) pair of added tokens, `call_start`
    its call's opening token, which also ends reasoning (`ReasoningCut`)."""

    states: ClassVar[type[Enum]]
    think: ClassVar[tuple[str, str]]
    call_start: ClassVar[str]

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, tool_calls: bool = True, in_reasoning: bool = False
    ) -> None:
        """`tools`: the request's tools (names and parameter schemas); `tool_calls`: whether calls are parsed at all;
        `in_reasoning`: the prompt opened `<think>`."""
        self._schemas = tool_schemas(tools)
        self._parse_calls = tool_calls
        self._state = self.states["REASONING" if in_reasoning else "START"]
        self._out = CallOutput()
        self._cut = ReasoningCut()

    @property
    def saw_tool_call(self) -> bool:
        return self._out.sent_call

    def _think_marker(self, state: Enum, marker: str) -> Enum | None:
        """A marker token met in `state`: at `START` a think start opens reasoning and any other marker moves to
        `CONTENT`; in `REASONING` a think end closes it, a think start before any reasoning text (the model
        opening again the block its prompt opened) is dropped, and a call start (when calls are parsed) ends it, to
        be handled in `CONTENT` (vLLM's Qwen3 reasoning parser likewise promotes such calls out of reasoning); the
        think end such a call leaves behind is dropped in `CONTENT`; any other marker in `REASONING` is reasoning text.
        None when the marker was consumed so, else the state in which the caller handles it."""
        states = self.states
        if state is states["START"]:
            if marker == self.think[0]:
                self._state = states["REASONING"]
                return None
            self._state = state = states["CONTENT"]
        if state is states["REASONING"]:
            if marker == self.think[1]:
                self._state = states["CONTENT"]
                return None
            if marker == self.think[0] and not self._out.reasoning_started:
                return None
            if marker != self.call_start or not self._parse_calls:
                self._out.reasoning(marker)  # any other marker is reasoning text
                return None
            self._cut.cut()
            self._state = state = states["CONTENT"]
        elif state is states["CONTENT"] and self._cut.takes_end(marker == self.think[1]):
            return None
        return state
