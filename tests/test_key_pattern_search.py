"""key_patterns.searched: whether a JSON Schema pattern matches a name (searched, not anchored), by the pattern's
position automaton in bounded time; None where it cannot say exactly (required.py then keeps its 400)."""

from __future__ import annotations

import random
import re

import pytest

from gateway.grammars.key_patterns import searched

_PIECES = ["a", "b", "c", ".", "[ab]", "[^a]", "\\d", "\\w", "\\s", "-", "_", "1"]


def _pattern(rng: random.Random, depth: int = 0) -> str:
    """A random pattern of literals, classes, groups, alternations and repeats."""
    parts = []
    for _ in range(rng.randrange(1, 4)):
        kind = rng.randrange(6 if depth < 2 else 3)
        if kind < 3:
            part = rng.choice(_PIECES)
        elif kind == 3:
            part = f"({_pattern(rng, depth + 1)}|{_pattern(rng, depth + 1)})"
        else:
            part = f"({_pattern(rng, depth + 1)})"
        parts.append(part + rng.choice(["", "", "*", "+", "?", "{1,2}", "{2}", "*?"]))
    return "".join(parts)


def test_it_agrees_with_python_re_search() -> None:
    """Seeded: patterns with or without `^` / `$`, names of the pieces' characters and a few others."""
    rng = random.Random(18)
    told = 0
    for _ in range(400):
        pattern = rng.choice(["", "^"]) + _pattern(rng) + rng.choice(["", "$"])
        for _ in range(8):
            name = "".join(rng.choice("abc1_- x") for _ in range(rng.randrange(6)))
            found = searched(pattern, name)
            assert found is not None, (pattern, name)
            assert found == bool(re.search(pattern, name)), (pattern, name)
            told += found
    assert 0 < told < 400 * 8  # both answers drawn


@pytest.mark.parametrize(
    ("pattern", "name"),
    [
        ("^b", "bé"),  # not printable ASCII: `.`, `\d`, `\w` differ between dialects there
        ("b", "b\n"),
        ("^(b)\\1", "bb"),  # a back-reference
        ("^(?=b)", "b"),  # a lookahead
        ("(?i)^b", "B"),  # a flag
        ("^b*+b", "bb"),  # possessive: matches nothing, the automaton would say it does
        ("^b\\Z", "b"),  # ECMA 262 reads `\Z` as `Z`
        ("a\\bb", "ab"),  # an anchor inside
        ("[", "a"),  # no pattern
    ],
)
def test_what_it_cannot_say_exactly_is_none(pattern: str, name: str) -> None:
    assert searched(pattern, name) is None


def test_its_work_is_bounded() -> None:
    """Past the bound, None, whatever the time it would have taken; a backtracking matcher's worst case is cheap."""
    assert searched("[a-z]{1,1000}!", "a" * 4000) is None  # ~1000 positions live at each of 4,000 characters
    assert searched("[a-z]{1,100}!", "a" * 20 + "!") is True
    assert searched("^(a|a)*$", "a" * 40 + "!") is False  # exponential for `re`
    assert searched("^(a+)+$", "a" * 40) is True
