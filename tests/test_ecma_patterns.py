"""JSON Schema patterns (ECMA-262) searched in listed values with the `regex` module (gateway/grammars/ecma_patterns.py):
each piece read as ECMA-262 reads it where Python's reading differs, no translation where unsure, and a time budget
that a hostile pattern spends (then nothing more is searched)."""

from __future__ import annotations

import random
import re

import pytest

from gateway.grammars.ecma_patterns import PatternSearch, Unchecked, translated

ECMA_READINGS = [  # (pattern, value, whether ECMA-262 finds a match): Python's `re` answers the opposite for each
    ("^x$", "x\n", False),  # Python's `$` matches before a final newline
    (r"^\d$", "\u0663", False),  # Arabic-Indic three: a digit to Python's unicode `\d`
    (r"^\w+$", "\u00e9t\u00e9", False),  # é: a word character to Python's `\w`
    (r"^\W$", "\u00e9", True),
    (r"\bb", "\u00e9b", True),  # ECMA's word characters are ASCII: a boundary between é and b
    (r"^.$", "\r", False),  # ECMA's `.` refuses every line terminator
    (r"^.$", "\u2028", False),
    (r"^\s$", "\ufeff", True),  # ECMA's whitespace: U+FEFF in, U+001C out
    (r"^\s$", "\x1c", False),
    (r"^\S$", "\x85", True),
]


@pytest.mark.parametrize(("pattern", "value", "ecma"), ECMA_READINGS)
def test_each_piece_is_read_as_ecma_262_reads_it(pattern: str, value: str, ecma: bool) -> None:
    assert (re.search(pattern, value) is not None) != ecma  # the case tells the two readings apart
    assert PatternSearch()(pattern, value) is ecma


@pytest.mark.parametrize(
    "pattern",
    [
        "(?<=a)b", "(?<!a)b", "(?<n>a)", "(?P<n>a)", "(?=a)", "(?!a)", "(?i)a", r"\p{L}", r"\P{L}", r"(a)\1",
        r"\k<n>", "a{,3}", "a{2", "[]", "[^]", r"\Z", r"\A", r"\z", "a*+", "a**", "*a", "a|*", "(*a)", r"[\D]",
        r"[\W]", "[[a]]", "[a--b]", "[a&&b]", r"\cA", "\U0001f600", r"\u{1F600}", r"\ud83d", "(a", "a)", "a{3,1}",
        r"\x4", "\\", r"[\d-z]", r"\e", "^*", "a{99999}",
    ],
)  # fmt: skip
def test_syntax_the_dialects_may_read_apart_has_no_translation(pattern: str) -> None:
    assert translated(pattern) is None
    with pytest.raises(Unchecked):
        PatternSearch()(pattern, "a")


def _random_pattern(rng: random.Random, depth: int = 0) -> str:
    """A pattern of the translated syntax over a small alphabet (one that Python's `re` reads as ECMA-262 does on
    ASCII text without line terminators)."""
    pieces = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(8 if depth < 2 else 6)
        piece = {
            0: lambda: rng.choice("ab-"),
            1: lambda: rng.choice([r"\d", r"\w", r"\s", r"\D", r"\W", r"\S", ".", r"\.", r"\-"]),
            2: lambda: rng.choice(["[ab]", "[^a]", r"[\d_]", "[a-c-]", r"[\w.]", r"[\s\-]"]),
            3: lambda: rng.choice(["^", "$", r"\b", r"\B"]),
            4: lambda: rng.choice("ab1"),
            5: lambda: rng.choice(["x", r"\x61", r"\u0062"]),
            6: lambda: "(" + _random_pattern(rng, depth + 1) + ")",
            7: lambda: "(?:" + _random_pattern(rng, depth + 1) + "|" + _random_pattern(rng, depth + 1) + ")",
        }[kind]()
        if kind != 3 and rng.random() < 0.4:
            piece += rng.choice(["*", "+", "?", "{2}", "{1,2}", "{0,}", "*?", "+?", "{1,3}?"])
        pieces.append(piece)
    return "".join(pieces)


def test_translated_patterns_match_what_python_matches_on_plain_ascii() -> None:
    """Seeded: on ASCII text without a newline both readings agree, so the translation must too (a piece written
    wrongly, a quantifier or class lost, shows here). Not on the empty text: Python 3.11's `\\B` never matches
    there, ECMA-262's (and `regex`'s) does."""
    rng = random.Random(18)
    search = PatternSearch(seconds=60.0)
    for _ in range(400):
        pattern = _random_pattern(rng)
        assert translated(pattern) is not None, pattern
        for _ in range(12):
            value = "".join(rng.choice("ab1_- .xzA") for _ in range(rng.randint(1, 6)))
            assert search(pattern, value) == (re.search(pattern, value) is not None), (pattern, value)


def test_a_hostile_pattern_spends_the_budget_and_nothing_more_is_searched() -> None:
    """`regex` times out where Python's `re` would search for ages (2**60 ways to split 60 `a`s); once the schema's
    time is spent, no search runs (a cheap one is Unchecked too)."""
    search = PatternSearch(seconds=0.05)
    with pytest.raises(Unchecked, match="pattern searches"):
        search("^(a|a)*$", "a" * 60 + "!")
    with pytest.raises(Unchecked, match="pattern searches"):
        search("^a$", "a")


def test_a_pattern_that_ran_out_of_time_spends_a_fresh_budget_at_once() -> None:
    """Remembered: the JSON grammars fold each of a family's argument values with a budget of its own, so 128
    values beside one hostile pattern would each spend one (fails before: each fresh budget searched it again)."""
    with pytest.raises(Unchecked):
        PatternSearch(seconds=0.05)("^(a|aa)*$", "a" * 90 + "!")
    fresh = PatternSearch()
    with pytest.raises(Unchecked):
        fresh("^(a|aa)*$", "aa")
    assert fresh.left == 0


def test_a_value_past_the_basic_plane_is_not_checked() -> None:
    """ECMA-262 without the `u` flag reads U+1F600 as two code units (`^.$` refuses it; Python takes it)."""
    with pytest.raises(Unchecked, match="U\\+FFFF"):
        PatternSearch()("^.$", "\U0001f600")
