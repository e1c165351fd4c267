"""A raw string pattern's strings held to `minLength` .. `maxLength` by one count (grammars/length_bounds.py): the
counts written, and the same strings as Python's `re.fullmatch` with the length bounds, sampled at random."""

from __future__ import annotations

import random
import re

import pytest
import xgrammar as xgr

from gateway.grammars.length_bounds import length_bounded
from gateway.grammars.safe_json import raw_pattern_ebnf

_COMPILER = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)


@pytest.mark.parametrize(
    ("pattern", "low", "high", "counts"),
    [
        (r"^[a-z]{1,64}@x\.com$", 0, 10, "root_1{1, 4}"),  # the literal's 6 characters taken from the bound
        (r"^[a-z]{2,}$", 5, None, "root_1{5, -1}"),
        (r"^\d{4}-[a-z]{0,9}$", 7, 8, 'root_1{4, 4} "-" root_2{2, 3}'),  # a fixed count is part of the fixed length
        (r"^\d{4}-\d{2}$", 0, 7, "root_1{4, 4}"),  # a fixed length within the bounds: as it was
        (r"^\d{4}-\d{2}$", 0, 6, None),  # never within them
        (r"^[a-z]+$", 0, 3, "root_1{1, 3}"),  # `+`, a recursion, counted
        (r"^[a-z]+$", 0, 100000, "root_1{1, 100000}"),
        (r"^x*$", 100000, None, "root_1{100000, -1}"),  # `*` of a character, as its class
        (r"^[A-Z][a-z]*$", 2, 6, "root_1{1, 1} root_2{1, 5}"),  # inline `*`
        (r"^[a-z]?$", 1, 1, "root_1{1, 1}"),
        (r"^[a-z]+$", 0, 0, None),  # no string that short
        (r"^[a-z]{1,3}-[a-z]{1,3}$", 0, 7, "root_1{1, 3}"),  # two counts that imply the bounds: as they are
        (r"^[a-z]{1,3}-[a-z]{1,3}$", 0, 4, None),  # two counts the bounds cut into together
        (r"^[a-z]+@[a-z]+$", 3, None, "root_1{1, -1}"),  # implied: at least 3 already
        (r"^[a-z]+@[a-z]+$", 0, 10, None),  # no most of their own
        (r"^(ab)+$", 0, 4, None),  # a group repeated: no class sequence
    ],
)
def test_the_bounds_narrow_one_count(pattern, low, high, counts) -> None:
    bounded = length_bounded(raw_pattern_ebnf(pattern, "p", True), low, high)
    assert (bounded is None) is (counts is None)
    if bounded is not None:
        assert counts in bounded.splitlines()[0]


@pytest.mark.parametrize(
    ("pattern", "low", "high"),
    [
        (r"^[a-z]+$", 2, 5),
        (r"^[ab]*$", 0, 3),
        (r"^a+$", 3, None),
        (r"^[ab]?$", 1, 4),
        (r"^[A-Z][a-z]*-\d{2}$", 5, 7),
        (r"^[a-z]{1,64}@x\.com$", 7, 9),
        (r"^\d+\.\d{2}$", 0, 6),
        (r"^[^<\s]+$", 3, 6),
        (r"^[a-z]{1,2}-[0-9]{0,2}$", 0, 5),
    ],
)
def test_the_bounded_grammar_takes_the_patterns_strings_of_those_lengths(pattern, low, high) -> None:
    """Every sample (of characters around the pattern's, lengths 0 .. 9) the grammar takes exactly where the pattern
    matches it and its length is within the bounds."""
    compiled = _COMPILER.compile_grammar(length_bounded(raw_pattern_ebnf(pattern, "p", True), low, high))
    rng = random.Random(pattern)
    alphabet = "abzAZ09-.@x <\t"
    samples = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(10))) for _ in range(300)]
    samples += (
        ["a" * n for n in range(9)]
        + ["A" + "b" * n + "-12" for n in range(5)]
        + ["a@x.com", "ab@x.com", "abc@x.com", "1.25", "12.50", "a-1", "ab-12"]
    )
    taken = 0
    for text in samples:
        matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
        takes = matcher.accept_string(text) and matcher.is_terminated()
        fits = re.fullmatch(pattern, text) is not None and low <= len(text) <= (high if high is not None else 99)
        assert takes is fits, (pattern, text)
        taken += takes
    assert taken >= 2
