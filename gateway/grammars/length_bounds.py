"""A raw string pattern's strings held to `minLength` .. `maxLength` exactly, where one count can say it.

xgrammar's `Grammar.from_regex` prints a pattern of character classes and literals as one root sequence: literals
(`"@"`), a class inline (`[a-z]`, `[a-z]*`), a rule counted (`R{2, 8}`, `R ::= (([a-z]))` or `(("a"))`), and a
class's or a character's `+`, `*` or `?` as a rule of its own (`R ::= (([a-z] R) | ([a-z]))`, `R ::= ("" | ("a"
R))`, `R ::= ("" | ([a-z]))`). Read as one sequence of units (a class, a character as its class) each counted
`least` .. `most` times, and literals, its strings' length is the literals' plus the counts'. Where one unit's count
varies, the length bounds narrow that count (`^[a-z]+$` within 10: `[a-z]{1,10}`); where several do, the bounds are
held only where the pattern implies them (`^[a-z]{1,3}-[0-9]{1,4}$` within 8): any other intersection counts the
units together, which no count of one writes (None; the caller keeps the pattern alone, refused under strict). The
sequence is written as `counted_classes.closed_value` takes it (a rule per class, counted in the root), which counts
it up to the value's closing tag in one rule: ~10-20 ms of compile on DeepSeek's vocabulary at any bound
(bench/raw_length_bench.py).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from gateway.grammars.patterns import class_range

_CLASS = r"\[\^?(?:[^\]\\]|\\.)*\]"
_UNIT = rf'{_CLASS}|"[^"\\]"'
"""A class as from_regex prints it, or a literal of one character (no escape)."""
_ROOT = re.compile(r"^root ::= \(\((.*)\)\)$")
_RULE = re.compile(r"^(\w+) ::= (.*)$")
_ROOT_ITEM = re.compile(rf'(\w+)(?:\{{(\d+), (-?\d+)\}})?|({_CLASS})(\*)?|"([^"\\]*)"')
_ONE = re.compile(rf"^\(\(({_UNIT})\)\)$")
_PLUS = re.compile(rf"^\(\(({_UNIT}) (\w+)\) \| \(({_UNIT})\)\)$")
_STAR = re.compile(rf'^\(""\s*\|\s*\(({_UNIT}) (\w+)\)\)$')
_OPTIONAL = re.compile(rf'^\(""\s*\|\s*\(({_UNIT})\)\)$')


class Item(NamedTuple):
    """A literal (`unit` None: `text`), or a class `unit` counted `least` .. `most` times (-1: no most)."""

    unit: str | None
    text: str
    least: int
    most: int

    @property
    def varies(self) -> bool:
        return self.unit is not None and self.least != self.most


def length_bounded(regex_ebnf: str, low: int, high: int | None) -> str | None:
    """`regex_ebnf` (`Grammar.from_regex`'s, as `safe_json.raw_pattern_ebnf` gives it) with its strings' length held
    to `low` .. `high` (None: no most) exactly, as a root sequence of counted class rules; None where that is no
    narrowing of one count (see the module), or no string of the pattern has such a length."""
    items = class_sequence(regex_ebnf)
    if items is None:
        return None
    varying = [item for item in items if item.varies]
    fixed = sum(len(item.text) if item.unit is None else item.least for item in items if not item.varies)
    if len(varying) == 1:
        one = varying[0]
        least = max(one.least, low - fixed)
        most = one.most if high is None else high - fixed if one.most < 0 else min(one.most, high - fixed)
        if high is not None and most < least:
            return None
        items = [item._replace(least=least, most=most) if item is one else item for item in items]
    else:
        shortest = fixed + sum(item.least for item in varying)
        longest = None if any(item.most < 0 for item in varying) else fixed + sum(item.most for item in varying)
        if shortest < low or (high is not None and (longest is None or longest > high)):
            return None  # no count: bounds outside a fixed length; several: the bounds cut into them together
    return _written(items)


def class_sequence(regex_ebnf: str) -> list[Item] | None:
    """`regex_ebnf`'s root as one sequence of literals and counted units (see the module); None for any other."""
    lines = regex_ebnf.strip().splitlines()
    root = _ROOT.match(lines[0]) if lines else None
    rules = {m[1]: m[2] for m in map(_RULE.match, lines[1:]) if m}
    if root is None or len(rules) != len(lines) - 1:
        return None
    found = list(_ROOT_ITEM.finditer(root[1]))
    if " ".join(m[0] for m in found) != root[1]:
        return None
    items = []
    for m in found:
        if m[6] is not None:
            items.append(Item(None, m[6], 1, 1))
        elif m[4] is not None:
            items.append(Item(_class(m[4]), "", 0 if m[5] else 1, -1 if m[5] else 1))
        else:
            item = _rule_item(m[1], rules.get(m[1], ""))
            if item is None or (m[2] is not None and (item.least, item.most) != (1, 1)):
                return None  # a repetition counted again
            items.append(item if m[2] is None else item._replace(least=int(m[2]), most=int(m[3])))
    return items


def _rule_item(name: str, body: str) -> Item | None:
    """The unit a rule of one unit (`_ONE`), or its `+`, `*` or `?`, counts; None for any other rule."""
    if m := _ONE.match(body):
        return Item(_class(m[1]), "", 1, 1)
    if (m := _PLUS.match(body)) and m[2] == name and m[1] == m[3]:
        return Item(_class(m[1]), "", 1, -1)
    if (m := _STAR.match(body)) and m[2] == name:
        return Item(_class(m[1]), "", 0, -1)
    if m := _OPTIONAL.match(body):
        return Item(_class(m[1]), "", 0, 1)
    return None


def _class(unit: str) -> str:
    """A unit as a class: a one-character literal `"a"` as `[a]`."""
    return unit if unit.startswith("[") else f"[{class_range(ord(unit[1]), ord(unit[1]))}]"


def _written(items: list[Item]) -> str:
    """`items` as from_regex prints a sequence of counted classes: the root, then one rule per class."""
    names = {unit: f"root_{n}" for n, unit in enumerate(dict.fromkeys(i.unit for i in items if i.unit), 1)}
    body = " ".join(
        f'"{item.text}"' if item.unit is None else f"{names[item.unit]}{{{item.least}, {item.most}}}" for item in items
    )
    return "\n".join([f"root ::= (({body}))", *(f"{name} ::= (({unit}))" for unit, name in names.items())]) + "\n"
