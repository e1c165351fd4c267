"""Stop strings across piece boundaries: never leaked, earliest match wins."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends.stop_strings import StopMatcher, held_prefix
from gateway.types import Piece


def run(stops: list[str], chunks: list[str]) -> tuple[str, str | None]:
    matcher = StopMatcher(stops)
    out = []
    for chunk in chunks:
        out += matcher.feed([Piece(chunk)])
    if matcher.matched is None:
        out += matcher.flush()
    return "".join(p.text for p in out), matcher.matched


def test_match_across_chunks():
    assert run(["STOP"], ["hello S", "T", "OP and more"]) == ("hello ", "STOP")


def test_prefix_is_held_back_not_leaked():
    matcher = StopMatcher(["</end>"])
    assert matcher.feed([Piece("text </e")]) == [Piece("text ")]
    assert matcher.feed([Piece("x")]) == [Piece("</ex")]


def test_unfinished_prefix_is_released_at_the_end():
    assert run(["STOP"], ["abc ST"]) == ("abc ST", None)


def test_overlapping_prefixes():
    # "aab" must be found although the first "aa" looked like the start of "aaa"
    assert run(["aaa", "aab"], ["a", "a", "b!"]) == ("", "aab")
    assert run(["abcd", "bc"], ["ab", "cx"]) == ("a", "bc")


def test_earliest_match_wins():
    assert run(["world", "lo w"], ["hello world"]) == ("hel", "lo w")


def test_nothing_after_a_match():
    matcher = StopMatcher(["x"])
    assert matcher.feed([Piece("axb"), Piece("c")]) == [Piece("a")]
    assert matcher.feed([Piece("more")]) == []


def test_control_pieces_pass_and_release_held_text():
    matcher = StopMatcher(["<|im_end|>x"])
    out = matcher.feed([Piece("ok <|im"), Piece("<|im_end|>", 2)])
    assert out == [Piece("ok "), Piece("<|im"), Piece("<|im_end|>", 2)]


@pytest.mark.parametrize("stops", [[], ["zzz"]])
def test_no_match_passes_everything(stops):
    assert run(stops, ["a", "b", "c"]) == ("abc", None)


@given(
    text=st.text(alphabet="abc", max_size=30),
    stop=st.text(alphabet="abc", min_size=1, max_size=4),
    cuts=st.lists(st.integers(0, 30)),
)
def test_same_answer_however_chunked(text, stop, cuts):
    bounds = sorted({0, len(text), *(c for c in cuts if c < len(text))})
    chunks = [text[a:b] for a, b in itertools.pairwise(bounds)]
    expected = text.split(stop)[0] if stop in text else text
    assert run([stop], chunks) == (expected, stop if stop in text else None)


def test_unarmed_text_cannot_end_a_stop_string():
    """vLLM's min_tokens: a stop string must end in text fed armed; one that only starts before still counts."""
    matcher = StopMatcher(["ab", "xy"])
    assert matcher.feed([Piece("1ab2x")], armed=False) == [Piece("1ab2")]
    assert matcher.matched is None
    assert matcher.feed([Piece("y3")]) == []
    assert matcher.matched == "xy"


def test_a_match_inside_held_unarmed_text_is_not_taken_later():
    matcher = StopMatcher(["ab", "abcd"])
    assert matcher.feed([Piece("abc")], armed=False) == []  # "abc" is held: it may become "abcd"
    assert matcher.feed([Piece("x")]) == [Piece("abcx")]  # "ab" ended while unarmed
    assert matcher.matched is None


@given(st.text(alphabet="<>/_acilot x", max_size=16))
def test_held_prefix_is_the_longest_suffix_that_begins_a_string(text):
    strings = ("</tool_call>", "<tool_call>", "x", "ooo")
    suffixes = [n for s in strings for n in range(1, min(len(s), len(text) + 1)) if text.endswith(s[:n])]
    assert held_prefix(text, strings) == max(suffixes, default=0)
