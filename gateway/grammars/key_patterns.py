"""EBNF for a `patternProperties` key that is none of the declared names (an XML style's pattern parameter).

xgrammar writes a pattern key as the pattern's full match, so a key pattern that matches a declared name lets a
free parameter repeat it (`n` written as itself, then again as a pattern key whose value its own schema refuses;
the parser keeps the last). Here the pattern (Python's `re` parser reads it) becomes a position automaton
(Glushkov's: a state per character class written, so no empty moves) walked together with the trie of the
declared names' prefixes: a key may end where the automaton accepts unless its text so far is a declared name,
and once it leaves the trie it is the automaton's own rules. Character classes mean what xgrammar's regexes mean
(`.` any character, `\\d` `[0-9]`, `\\w` `[a-zA-Z0-9_]`, `\\s` its whitespace list). A pattern of other syntax
(flags, lookarounds, back-references, anchors inside it), or whose automaton or product passes `_MOST_STATES`,
has no such rules (None): the caller keeps xgrammar's key. Where the style bounds a name (qwen_xml: 64
characters, none of `>` or a newline, which its parser cannot read back), the walk counts the characters, and a
state in a pattern's closing loop (`[a-z]+`) ends in a count of blocks of 8 (`_loop_rules`: ~60 ms to compile
`^[a-z]+$` on Qwen3's vocabulary, 64 chained states ~180 ms).
The same automaton says whether JSON Schema's pattern matches a name (`searched`: searched in it, every start
followed at once, in bounded work; required.py declares a required name by the patterns it matches).
"""

from __future__ import annotations

import math
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
        self.possessive = False

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
            self.possessive |= op is sre.POSSESSIVE_REPEAT  # `a*+a` matches nothing: not this automaton's language
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


class Parsed:
    """A pattern's automaton: its first and last positions, whether it takes the empty text, and whether `^` opens
    it and `$` closes it (JSON Schema searches a pattern; xgrammar writes a key as its full match)."""

    def __init__(self, pattern: str) -> None:
        parsed = sre_parse.parse(pattern)
        if parsed.state.flags & ~sre.SRE_FLAG_UNICODE:
            raise _Unsupported
        items = list(parsed)
        self.begins = bool(items) and items[0] == (sre.AT, sre.AT_BEGINNING)
        self.ends = len(items) > int(self.begins) and items[-1][0] is sre.AT and items[-1][1] != sre.AT_BEGINNING
        self.ends_as_z = self.ends and items[-1][1] == sre.AT_END_STRING
        self.automaton = _Automaton()
        self.first, self.last, self.nullable = self.automaton.sequence(items, edges=True)

    def longest(self) -> float:
        """The most characters a full match takes (infinity when a loop is reachable)."""
        follow, memo, open_ = self.automaton.follow, {}, set()

        def depth(p: int) -> float:
            if p in open_:
                return math.inf
            if p not in memo:
                open_.add(p)
                memo[p] = 1 + max((depth(q) for q in follow[p]), default=0)
                open_.discard(p)
            return memo[p]

        return max((depth(p) for p in self.first), default=0)

    def searches(self, text: str, most_work: int) -> bool | None:
        """Whether a part of `text` is a full match (at its start where `^` opens the pattern, at its end where `$`
        closes it), every start followed at once: at most the automaton's positions a character; None past
        `most_work` (each position a character reaches, and 32 edges followed, one unit)."""
        chars, follow = self.automaton.chars, self.automaton.follow
        active: set[int] = set()
        for k in range(len(text) + 1):
            starts = not self.begins or k == 0
            if (active & self.last or (starts and self.nullable)) and (not self.ends or k == len(text)):
                return True
            if k == len(text) or not (active or starts):
                return False
            point = ord(text[k])
            nexts = [follow[p] for p in active] + ([self.first] if starts else [])
            reached = set().union(*nexts)
            most_work -= len(reached) + sum(map(len, nexts)) // 32
            if most_work < 0:
                return None
            active = {q for q in reached if _holds(chars[q], point)}
        return False


def parsed_pattern(pattern: str) -> Parsed | None:
    """`pattern`'s automaton, or None where its syntax is not followed, a class is empty or it passes
    `_MOST_STATES`."""
    try:
        parsed = Parsed(pattern)
    except (_Unsupported, sre.error, RecursionError, OverflowError):
        return None
    return None if any(not chars for chars in parsed.automaton.chars) else parsed


_SEARCH_WORK = 200_000
"""Work `searched` does for one name at most (`Parsed.searches`: ~0.05 s of CPU)."""


def searched(pattern: str, name: str) -> bool | None:
    """Whether JSON Schema's `pattern` matches `name` (searched in it, not anchored), in time bounded by
    `_SEARCH_WORK`; None where this cannot say exactly: a name not of printable ASCII (`.`, `\\d`, `\\w`, `\\s` mean
    the same there in ECMA 262, Python and xgrammar), syntax the automaton does not follow, a possessive repeat,
    `\\Z` (ECMA 262 reads a `Z`), or past the bound."""
    if not all(" " <= c <= "~" for c in name):
        return None
    parsed = parsed_pattern(pattern)
    if parsed is None or parsed.automaton.possessive or parsed.ends_as_z:
        return None
    return parsed.searches(name, _SEARCH_WORK)


def key_pattern_rules(
    pattern: str, declared: Iterable[str], rule: str, most: int | None = None, unreadable: Chars = ()
) -> str | None:
    """EBNF rules, `rule` the one to reference, for a full match of `pattern` that is none of `declared`, of at most
    `most` characters and none of `unreadable` (what the style's parser cannot read back in a name); None where
    xgrammar's key already is that, its syntax is not followed or the rules would pass `_MOST_STATES` (`unwritten`
    tells these apart)."""
    parsed = parsed_pattern(pattern)
    if parsed is None:
        return None
    counted = most is not None and parsed.longest() > most
    bodies = _walk(parsed, set(declared), rule, most if counted else None, list(unreadable))
    if bodies is None:
        return None
    refused, alternatives, loops = bodies
    chars = parsed.automaton.chars
    narrowed = any(_minus(c, tuple(unreadable)) != c for c in chars) if unreadable else False
    if not (refused or counted or narrowed):
        return None
    live = _productive(alternatives)
    lines = []
    for name, body in alternatives.items():
        kept = [
            f"({text} {target})" if target else f"({text})" for text, target in body if not target or target in live
        ]
        if name in live or name == rule:
            lines.append(f"{name} ::= ({' | '.join(kept) or _NOTHING})")
    return "\n".join(lines + _loop_rules(loops, rule))


def shared_bound(left: int) -> int:
    """The characters a name may take after it leaves the trie with `left` to go: `left` less its excess over a
    multiple of 8 less 1 (a name that leaves it past its first character may come up to 7 short of `most`), so
    the tails of all depths share one chain of rules (one per depth cost 2.5x the compile)."""
    return left if left < 8 else left - (left + 1) % 8


Loops = dict[tuple[str, int], Chars]
"""Counted loops a walk ends in: (a tag of the class, characters left) and the class."""


def _loop_rules(loops: Loops, rule: str) -> list[str]:
    """`{rule}_loop_T_N`: 0 .. N characters of a class, as up to 7 or a block of 8 and 0 .. N - 8 more (xgrammar's
    compile cost grows with a count: `free_names` counts its tails so)."""
    lines, blocks = [], set()
    needed = {(p, left - 8 * k): chars for (p, left), chars in loops.items() for k in range(left // 8 + 1)}
    for (p, left), chars in sorted(needed.items()):
        more = f" | ({rule}_block_{p} {rule}_loop_{p}_{left - 8})" if left >= 8 else ""
        lines.append(f"{rule}_loop_{p}_{left} ::= (({_text(chars)}{{0, {min(left, 7)}}}){more})")
        if left >= 8 and p not in blocks:
            blocks.add(p)
            lines.append(f"{rule}_block_{p} ::= (({_text(chars)}{{8}}))")
    return lines


def unwritten(pattern: str, most: int | None, unreadable: Chars = ()) -> bool:
    """Whether xgrammar's key for `pattern` may be longer than `most` or hold `unreadable` and no rules here can
    say otherwise (`key_pattern_rules` gave None for want of syntax or states)."""
    if most is None and not unreadable:
        return False
    return key_pattern_rules(pattern, (), "k", most, unreadable) is None and (
        (parsed := parsed_pattern(pattern)) is None
        or (most is not None and parsed.longest() > most)
        or any(_minus(c, tuple(unreadable)) != c for c in parsed.automaton.chars)
    )


_State = tuple[int, str | None, int]
"""A position (-1 the start), the declared names' prefix written (None once off their trie), the characters
written (0 when not counted)."""


def _walk(
    parsed: Parsed, names: set[str], rule: str, most: int | None, unreadable: Chars
) -> tuple[bool, dict[str, list[tuple[str, str | None]]], Loops] | None:
    """The automaton walked with the trie of `names`' prefixes (and a count of the characters when `most`): each
    state's alternatives, a class into the next state, or the empty end; whether a declared name was refused; and
    the counted loops a state off the trie ends in (`_loop_rules`: position, characters left). None past
    `_MOST_STATES`."""
    automaton, last = parsed.automaton, parsed.last | ({-1} if parsed.nullable else set())
    trie: dict[str, set[int]] = {"": set()}
    for name in names:
        for depth in range(len(name)):
            trie.setdefault(name[:depth], set()).add(ord(name[depth]))
            trie.setdefault(name[: depth + 1], set())
    ids: dict[_State, str] = {(-1, "", 0): rule}
    bodies: dict[str, list[tuple[str, str | None]]] = {}
    todo, refused = [(-1, "", 0)], False
    loops: Loops = {}

    def target(state: _State) -> str:
        if state not in ids:
            ids[state] = f"{rule}_{len(ids)}"
            todo.append(state)
        return ids[state]

    while todo:
        p, prefix, written = state = todo.pop()
        if most is not None and prefix is None and p in parsed.last and p >= 0 and automaton.follow[p] == {p}:
            chars = _minus(automaton.chars[p], tuple(unreadable))  # the pattern's tail, `c*`: counted in blocks
            left = most - written
            loops[(str(p), left)] = chars
            bodies[ids[state]] = [(f"{rule}_loop_{p}_{left}", None)] if chars else [('""', None)]
            continue
        count = written + 1 if most is not None else 0
        children = {point: prefix + chr(point) for point in trie[prefix]} if prefix is not None else {}
        alternatives: list[tuple[str, str | None]] = []
        for q in sorted(parsed.first if p < 0 else automaton.follow[p]) if most is None or written < most else ():
            chars = _minus(automaton.chars[q], tuple(unreadable))
            for point, child in sorted(children.items()):
                if _holds(chars, point):
                    alternatives.append((_text([(point, point)]), target((q, child, count))))
            rest = _minus(chars, tuple((c, c) for c in children))
            if rest:
                alternatives.append((_text(rest), target((q, None, count))))
        if p in last:
            refused |= prefix in names
            alternatives += [] if prefix in names else [('""', None)]
        bodies[ids[state]] = alternatives
        if len(bodies) > _MOST_STATES:
            return None
    return refused, bodies, loops


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
