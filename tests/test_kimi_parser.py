"""The Kimi K3 output parser: channels, typed arguments, token-id markers, chunking invariance."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.families.kimi.markers import CLOSE, OPEN, SEP
from gateway.families.kimi.parser import KimiK3Parser
from gateway.types import Delta, Piece

_CONTROL = re.compile("(" + "|".join(map(re.escape, (OPEN, CLOSE, SEP))) + ")")
_IDS = {OPEN: 163587, CLOSE: 163588, SEP: 163589}


def pieces(*parts: str | Piece) -> list[Piece]:
    """Control tokens where a str spells a marker; a Piece passes as given (e.g. spelled marker text)."""
    out: list[Piece] = []
    for part in parts:
        if isinstance(part, Piece):
            out.append(part)
            continue
        for chunk in _CONTROL.split(part):
            if chunk:
                out.append(Piece(chunk, _IDS.get(chunk)))
    return out


def arg(key: str, kind: str, value: str | Piece) -> list[str | Piece]:
    return [f'{OPEN}argument key="{key}" type="{kind}"{SEP}', value, f"{CLOSE}argument{SEP}"]


def call(tool: str, *args: list[str | Piece], index: int = 1) -> list[str | Piece]:
    return [f'{OPEN}call tool="{tool}" index="{index}"{SEP}', *itertools.chain(*args), f"{CLOSE}call{SEP}"]


def tools(*calls: list[str | Piece]) -> list[str | Piece]:
    return [f"{OPEN}tools{SEP}", *itertools.chain(*calls), f"{CLOSE}tools{SEP}"]


@dataclass
class Answer:
    """What an OpenAI client accumulates from the deltas."""

    content: str = ""
    reasoning: str = ""
    calls: list[dict] = field(default_factory=list)
    deltas: list[Delta] = field(default_factory=list)

    def add(self, deltas: list[Delta]) -> None:
        for d in deltas:
            self.deltas.append(d)
            self.content += d.content
            self.reasoning += d.reasoning
            if d.tool_index is None:
                continue
            if d.tool_index == len(self.calls):
                assert d.tool_id and d.tool_name, "a call's first delta carries its id and name"
                self.calls.append({"id": d.tool_id, "name": d.tool_name, "arguments": ""})
            else:
                assert d.tool_id is None and d.tool_name is None, "id and name are sent once"
            self.calls[d.tool_index]["arguments"] += d.tool_arguments

    def arguments(self, i: int = 0) -> dict:
        return json.loads(self.calls[i]["arguments"])


def _ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def parse(items: list[Piece], channel: str = "response", chunks: list[int] | None = None) -> Answer:
    parser = KimiK3Parser(channel=channel, new_id=_ids())
    answer = Answer()
    sizes = chunks or [len(items)]
    start = 0
    for size in sizes:
        answer.add(parser.feed(items[start : start + size]))
        start += size
    answer.add(parser.feed(items[start:]))
    answer.add(parser.finish())
    return answer


def test_response_and_typed_arguments() -> None:
    out = parse(
        pieces(
            f"answer{CLOSE}response{SEP}",
            *tools(
                call(
                    "calc",
                    arg("x", "number", "1"),
                    arg("flag", "boolean", "true"),
                    arg("text", "string", "raw"),
                    arg("n", "null", "null"),
                    arg("a", "array", "[1,2]"),
                    arg("o", "object", '{"k":{"z":1}}'),
                )
            ),
        )
    )
    assert out.content == "answer"
    assert out.calls[0]["name"] == "calc" and out.calls[0]["id"] == "call_0"
    assert out.arguments() == {"x": 1, "flag": True, "text": "raw", "n": None, "a": [1, 2], "o": {"k": {"z": 1}}}


def test_thinking_then_response() -> None:
    out = parse(
        pieces(f"step one{CLOSE}think{SEP}{OPEN}response{SEP}done{CLOSE}response{SEP}{CLOSE}message{SEP}"),
        channel="think",
    )
    assert (out.reasoning, out.content, out.calls) == ("step one", "done", [])


def test_missing_think_close_does_not_trap_the_answer() -> None:
    out = parse(pieces(f"plan{OPEN}response{SEP}Hello{CLOSE}response{SEP}"), channel="think")
    assert (out.reasoning, out.content) == ("plan", "Hello")
    out = parse(pieces("plan", *tools(call("f", arg("a", "string", "x")))), channel="think")
    assert out.reasoning == "plan" and out.arguments() == {"a": "x"}


def test_truncated_reasoning_stays_reasoning() -> None:
    assert parse(pieces("The user wants"), channel="think").reasoning == "The user wants"


def test_attributes_are_unescaped_quot_then_amp() -> None:
    out = parse(pieces(*tools(call("a&amp;b&quot;c", arg("k&amp;quot;q", "string", "v")))))
    assert out.calls[0]["name"] == 'a&b"c'
    assert out.arguments() == {"k&quot;q": "v"}


def test_less_than_in_attributes_and_whitespace_in_tags() -> None:
    out = parse(
        pieces(
            f"{OPEN} response {SEP}hi{CLOSE} response {SEP}", *tools(call("calc<beta", arg("foo<bar", "string", "raw")))
        ),
        channel="think",
    )
    assert out.content == "hi"
    assert out.calls[0]["name"] == "calc<beta" and out.arguments() == {"foo<bar": "raw"}


def test_malformed_or_non_json_typed_values_fall_back_to_the_raw_string() -> None:
    out = parse(
        pieces(*tools(call("calc", arg("x", "number", "not-json"), arg("y", "number", "NaN"), arg("z", "object", ""))))
    )
    assert out.arguments() == {"x": "not-json", "y": "NaN", "z": ""}


def test_string_values_are_raw_and_json_escaped() -> None:
    value = 'line 1\n\tline 2 "quoted" \\ end ünï'
    out = parse(pieces(*tools(call("w", arg("content", "string", value)))))
    assert out.arguments() == {"content": value}


def test_tool_index_is_emission_order_never_the_model_index() -> None:
    out = parse(
        pieces(*tools(call("first", arg("a", "number", "1"), index=7), call("second", index=7), call("third", index=3)))
    )
    assert [c["name"] for c in out.calls] == ["first", "second", "third"]
    assert [c["id"] for c in out.calls] == ["call_0", "call_1", "call_2"]
    assert out.arguments(1) == {} and out.arguments(2) == {}


def test_call_without_index_or_arguments() -> None:
    out = parse(pieces(f'{OPEN}tools{SEP}{OPEN}call tool="calc"{SEP}{CLOSE}call{SEP}{CLOSE}tools{SEP}'))
    assert out.calls[0]["name"] == "calc" and out.calls[0]["arguments"] == "{}"


def test_repeated_key_keeps_the_first_value() -> None:
    out = parse(pieces(*tools(call("f", arg("a", "string", "1"), arg("a", "string", "2"), arg("b", "number", "3")))))
    assert out.arguments() == {"a": "1", "b": 3}


def test_spelled_markers_are_text() -> None:
    spelled = [Piece(CLOSE), Piece("argument"), Piece(SEP), Piece(" is how args end")]
    out = parse(
        pieces(
            *tools(
                call(
                    "write_file",
                    [f'{OPEN}argument key="content" type="string"{SEP}', *spelled, f"{CLOSE}argument{SEP}"],
                )
            )
        )
    )
    assert out.arguments() == {"content": f"{CLOSE}argument{SEP} is how args end"}
    out = parse([Piece(f"say {OPEN}tools{SEP} now")])
    assert out.content == f"say {OPEN}tools{SEP} now" and not out.calls


def test_call_cut_inside_its_first_argument_is_dropped() -> None:
    out = parse(
        pieces(
            f'{CLOSE}response{SEP}{OPEN}tools{SEP}{OPEN}call tool="get_weather" index="1"{SEP}{OPEN}argument key="city" type="string"{SEP}Par'
        )
    )
    assert out.calls == [] and out.content == ""


def test_call_cut_after_complete_arguments_is_closed() -> None:
    out = parse(pieces(f'{OPEN}tools{SEP}{OPEN}call tool="f" index="1"{SEP}', *arg("a", "number", "1")))
    assert out.arguments() == {"a": 1}


def test_arguments_stream_before_the_call_closes() -> None:
    parser = KimiK3Parser(channel="response", new_id=_ids())
    answer = Answer()
    answer.add(
        parser.feed(pieces(f'{OPEN}tools{SEP}{OPEN}call tool="w" index="1"{SEP}', *arg("path", "string", "a.txt")))
    )
    assert answer.calls[0]["arguments"] == '{"path":"a.txt"'
    answer.add(parser.feed(pieces(f'{OPEN}argument key="content" type="string"{SEP}hello')))
    assert answer.calls[0]["arguments"].endswith('"content":"hello')
    assert parser.saw_tool_call


def test_nameless_call_is_not_a_call() -> None:
    out = parse(pieces(*tools(call("", arg("a", "string", "x")))))
    assert out.calls == []


MIXED = pieces(
    "Think about ünïcode 😀 and ",
    Piece(OPEN),
    f"{CLOSE}think{SEP}{OPEN}response{SEP}Let me check.{CLOSE}response{SEP}",
    *tools(
        call("get_weather", arg("city", "string", "Paris"), arg("days", "number", "3")),
        call(
            "write_file",
            arg("path", "string", "x.txt"),
            [
                f'{OPEN}argument key="content" type="string"{SEP}',
                Piece(f"{CLOSE}argument{SEP} end"),
                f"{CLOSE}argument{SEP}",
            ],
        ),
        call(
            "save",
            arg("q&amp;a", "string", "fish & chips"),
            arg("bad", "number", "1e"),
            arg("o", "object", '{"a": [1, {"b": null}]}'),
        ),
    ),
    f"{CLOSE}message{SEP}",
)


def _split_text(items: list[Piece], cuts: list[int]) -> list[Piece]:
    """Ordinary pieces re-cut at arbitrary characters, as a detokenizer may deliver them."""
    out: list[Piece] = []
    for n, piece in enumerate(items):
        if piece.token_id is not None or len(piece.text) < 2:
            out.append(piece)
            continue
        at = sorted({c % len(piece.text) for c in cuts[n % len(cuts) :][:3]} - {0})
        out += [Piece(piece.text[a:b]) for a, b in zip([0, *at], [*at, len(piece.text)])]
    return out


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, 10_000), min_size=1, max_size=40), sizes=st.lists(st.integers(1, 6), max_size=60))
def test_same_answer_for_every_chunking(cuts: list[int], sizes: list[int]) -> None:
    whole = parse(MIXED, channel="think")
    split = parse(_split_text(MIXED, cuts), channel="think", chunks=sizes)
    assert (split.content, split.reasoning, split.calls) == (whole.content, whole.reasoning, whole.calls)
    assert whole.reasoning == f"Think about ünïcode 😀 and {OPEN}"
    assert whole.content == "Let me check."
    assert [c["name"] for c in whole.calls] == ["get_weather", "write_file", "save"]
    assert whole.arguments(1) == {"path": "x.txt", "content": f"{CLOSE}argument{SEP} end"}
    assert whole.arguments(2) == {"q&a": "fish & chips", "bad": "1e", "o": {"a": [1, {"b": None}]}}
