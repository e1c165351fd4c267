"""EBNF for a `patternProperties` key that is none of the declared names (an XML style's pattern parameter).

xgrammar writes a pattern key as the pattern's full match, so a key pattern that matches a declared name lets a
free parameter repeat it (`n` written as itself, then again as a pattern key whose value its own schema refuses;
the parser keeps the last). Here the pattern (Python's `re` parser reads it) becomes a position automaton
(Glushkov's: a state per character class written, so no empty moves) walked together with the trie of the
declared names' prefixes: a key may end where the automaton accepts unless its text so far is a declared name,
and once it leaves the trie it is the automaton's own rules. Character classes mean what xgrammar's regexes mean
(`.` any character, `\\d` `[0-9]`, `\\w` `[a-zA-Z0-9_]`, `\\s` its whitespace list). A pattern of other syntax
(flags, lookarounds, back-references, anchors inside it), or whose automaton or product passes `_MOST_STATES`,
has no such rules (None): the caller keeps xgrammar's key.
"""

from __future__ import annotations

import re._constants as sre
import re._parser as sre_parse
from collections.abc import Iterable
from typing import Any

from gateway.grammars.counted_classes import _minus, _union
from gateway.grammars.patterns import class_range

Chars = list[tuple[int, int]]
"""Sorted, disjoint, non-adjacent code point ranges."""
_ALL: Chars = [(0, 0x10FFFF)]
_SPACE: Chars = [
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
]
"""xgrammar's `\\s` (its regex converter's list)."""
_WORD: Chars = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_DIGIT: Chars = [(0x30, 0x39)]
_CATEGORIES = {
    sre.CATEGORY_DIGIT: (_DIGIT, False),
    sre.CATEGORY_NOT_DIGIT: (_DIGIT, True),
    sre.CATEGORY_WORD: (_WORD, False),
    sre.CATEGORY_NOT_WORD: (_WORD, True),
    sre.CATEGORY_SPACE: (_SPACE, False),
    sre.CATEGORY_NOT_SPACE: (_SPACE, True),
}
_MOST_STATES = 2048
"""Positions of the automaton (a count is written out: `[a-z]{1,64}` is 64) and rules of the product, at most."""


_Part = tuple[set[int], set[int], bool]
"""A part of a pattern in the automaton: the positions it may start and end at, and whether it may be empty."""


class _Unsupported(Exception):
    """Syntax outside what the automaton follows, or an automaton too large."""


def _holds(chars: Chars, point: int) -> bool:
    return any(low <= point <= high for low, high in chars)


class _Automaton:
    """Glushkov's automaton of a parsed pattern: `chars[p]` is what position p reads; `follow[p]` the positions
    that may read next."""

    def __init__(self) -> None:
        self.chars: list[Chars] = []
        self.follow: list[set[int]] = []

    def position(self, chars: Chars) -> _Part:
        if len(self.chars) >= _MOST_STATES:
            raise _Unsupported
        self.chars.append(chars)
        self.follow.append(set())
        p = len(self.chars) - 1
        return {p}, {p}, False

    def sequence(self, items: Iterable[Any], edges: bool = False) -> _Part:
        """Items one after another; with `edges`, `^` first and `$` last are the full match xgrammar writes."""
        items = list(items)
        parts = []
        for i, item in enumerate(items):
            if item[0] is sre.AT:
                at_edge = edges and (i == 0 or i == len(items) - 1)
                if not at_edge or item[1] not in (sre.AT_BEGINNING, sre.AT_END, sre.AT_END_STRING):
                    raise _Unsupported
                continue
            parts.append(self.item(item))
        return self.chain(parts)

    def chain(self, parts: list[_Part]) -> _Part:
        """The parts one after another: each one's last positions followed by the next's first."""
        first: set[int] = set()
        last: set[int] = set()
        nullable = True
        for f, la, n in parts:
            for p in last:
                self.follow[p] |= f
            first = first | f if nullable else first
            last = la | last if n else la
            nullable = nullable and n
        return first, last, nullable

    def item(self, item: tuple[Any, Any]) -> _Part:
        op, av = item
        if op is sre.LITERAL:
            return self.position([(av, av)])
        if op is sre.NOT_LITERAL:
            return self.position(_minus(_ALL, ((av, av),)))
        if op is sre.ANY:
            return self.position(_ALL)
        if op is sre.IN:
            return self.position(_class(av))
        if op is sre.SUBPATTERN:
            if av[1] or av[2]:  # flags
                raise _Unsupported
            return self.sequence(av[3])
        if op is sre.BRANCH:
            first: set[int] = set()
            last: set[int] = set()
            nullable = False
            for branch in av[1]:
                f, la, n = self.sequence(branch)
                first, last, nullable = first | f, last | la, nullable or n
            return first, last, nullable
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            return self.repeat(*av)
        raise _Unsupported

    def repeat(self, least: int, most: int, body: Any) -> _Part:
        """`body{least, most}` as `least` copies, then `most - least` optional ones (or a starred one)."""
        copies = least + (1 if most == sre.MAXREPEAT else most - least)
        if copies > _MOST_STATES:
            raise _Unsupported
        parts = []
        for i in range(copies):
            f, la, n = self.sequence(body)
            if most == sre.MAXREPEAT and i == copies - 1:
                for p in la:
                    self.follow[p] |= f
                n = True
            parts.append((f, la, n or i >= least))
        return self.chain(parts)


def _class(members: list[tuple[Any, Any]]) -> Chars:
    negated = bool(members) and members[0][0] is sre.NEGATE
    ranges: list[tuple[int, int]] = []
    for op, av in members[1:] if negated else members:
        if op is sre.LITERAL:
            ranges.append((av, av))
        elif op is sre.RANGE:
            ranges.append(av)
        elif op is sre.CATEGORY and av in _CATEGORIES:
            chars, inverted = _CATEGORIES[av]
            ranges.extend(_minus(_ALL, chars) if inverted else chars)
        else:
            raise _Unsupported
    chars = _union(ranges)
    return _minus(_ALL, chars) if negated else chars


def _text(chars: Chars) -> str:
    return "[" + "".join(class_range(low, high) for low, high in chars) + "]"


def key_pattern_rules(pattern: str, declared: Iterable[str], rule: str) -> str | None:
    """EBNF rules, `rule` the one to reference, for a full match of `pattern` that is none of `declared`; None
    where it matches none of them, its syntax is not followed or the rules would pass `_MOST_STATES`."""
    try:
        parsed = sre_parse.parse(pattern)
        if parsed.state.flags & ~sre.SRE_FLAG_UNICODE:
            raise _Unsupported
        automaton = _Automaton()
        first, last, nullable = automaton.sequence(list(parsed), edges=True)
    except (_Unsupported, sre.error, RecursionError, OverflowError):
        return None
    if any(not chars for chars in automaton.chars):
        return None
    bodies = _with_trie(automaton, first, last | ({-1} if nullable else set()), set(declared), rule)
    if bodies is None:
        return None
    live = _productive(bodies)
    free = f"{rule}_free"
    lines = []
    for name, body in bodies.items():
        kept = [
            f"({text} {target})" if target else f"({text})" for text, target in body if not target or target in live
        ]
        if name in live or name == rule:
            lines.append(f"{name} ::= ({' | '.join(kept) or _NOTHING})")
    for p in _reachable(automaton, first):
        escaped = [f"({_text(automaton.chars[q])} {free}_{q})" for q in sorted(automaton.follow[p])]
        ends = ['("")'] if p in last else []
        lines.append(f"{free}_{p} ::= ({' | '.join(escaped + ends)})")
    return "\n".join(lines)


def _with_trie(
    automaton: _Automaton, first: set[int], last: set[int], names: set[str], rule: str
) -> dict[str, list[tuple[str, str | None]]] | None:
    """The automaton (position -1 its start) walked with the trie of `names`' prefixes from (start, ""): each state's
    alternatives, a character into the next state or a class out of the trie into the automaton's own rule of a
    position (`{rule}_free_P`, None for the state), or the empty end. None when no name is refused or past
    `_MOST_STATES`."""
    trie: dict[str, set[int]] = {"": set()}
    for name in names:
        for depth in range(len(name)):
            trie.setdefault(name[:depth], set()).add(ord(name[depth]))
            trie.setdefault(name[: depth + 1], set())
    ids: dict[tuple[int, str], str] = {(-1, ""): rule}
    bodies: dict[str, list[tuple[str, str | None]]] = {}
    todo, refused = [(-1, "")], False
    while todo:
        p, prefix = state = todo.pop()
        children = {point: prefix + chr(point) for point in trie[prefix]}
        alternatives: list[tuple[str, str | None]] = []
        for q in sorted(first if p < 0 else automaton.follow[p]):
            for point, child in sorted(children.items()):
                if _holds(automaton.chars[q], point):
                    if (q, child) not in ids:
                        ids[(q, child)] = f"{rule}_{len(ids)}"
                        todo.append((q, child))
                    alternatives.append((_text([(point, point)]), ids[(q, child)]))
            rest = _minus(automaton.chars[q], tuple((c, c) for c in children))
            if rest:
                alternatives.append((f"{_text(rest)} {rule}_free_{q}", None))
        if p in last:
            refused |= prefix in names
            alternatives += [] if prefix in names else [('""', None)]
        bodies[ids[state]] = alternatives
        if len(bodies) + len(automaton.chars) > _MOST_STATES:
            return None
    return bodies if refused else None


_NOTHING = "[^\\0-\\U0010ffff]"
"""A rule body that takes nothing (every name along this path is a declared one): no character enters it."""


def _productive(bodies: dict[str, list[tuple[str, str | None]]]) -> set[str]:
    """The trie states from which a key can be finished (the others, dead ends, are left out)."""
    live: set[str] = set()
    grown = True
    while grown:
        grown = False
        for name, body in bodies.items():
            if name not in live and any(target is None or target in live for _, target in body):
                live.add(name)
                grown = True
    return live


def _reachable(automaton: _Automaton, first: set[int]) -> list[int]:
    seen, todo = set(first), list(first)
    while todo:
        for q in automaton.follow[todo.pop()]:
            if q not in seen:
                seen.add(q)
                todo.append(q)
    return sorted(seen)
