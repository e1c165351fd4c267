"""EBNF for a free parameter name (`additionalProperties`) that no `patternProperties` key of its object matches.

JSON Schema types a name by `additionalProperties` only where neither `properties` nor `patternProperties` claims
it, so the free names of an object with pattern keys are the name class (`[a-zA-Z_] [a-zA-Z0-9_]*`, at most `most`
characters) less its declared names and less every name a pattern matches. A pattern is searched (matched
anywhere unless `^` opens it, up to the end only where `$` closes it), so the rules are a deterministic walk of the
patterns' position automata (`key_patterns.Parsed`, one set of positions for them all) with the declared names'
trie and, when bounded, a count of the characters: a name may end where no pattern has matched and its text is no
declared name, and a walk whose patterns can no longer match, off the trie, goes on as any name characters
(`free_names`' tails); one that only loops until a pattern matches (`b` searched: any name characters but `b`) as
a count of blocks of 8 (`key_patterns.loop_rules`). While a pattern may still match, a bounded walk counts each
character (a state per length: qwen_xml's 64). The walk reads the name class's 63 characters one by one and joins those of one target
into a class. None where a pattern's syntax is not followed or the walk passes `key_patterns._MOST_STATES` (the
caller keeps the names less the declared ones: a gap, refused under strict).
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.grammars.counted_classes import _union
from gateway.grammars.key_patterns import (
    _MOST_STATES,
    _NOTHING,
    Loops,
    Parsed,
    _holds,
    _productive,
    _text,
    loop_rules,
    parsed_pattern,
)

_FIRST = "ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
_REST = "0123456789" + _FIRST
_Positions = frozenset[tuple[int, int]]
"""(pattern, position) pairs a walk may be at; position -1 a pattern's start."""


def unmatched_name_rules(
    patterns: Iterable[str], declared: Iterable[str], most: int | None, rule: str
) -> tuple[str, dict[int | None, str]] | None:
    """EBNF rules, `rule` the one to reference, for a name of the free-name class of at most `most` characters (any
    number when None) that is none of `declared` and that no pattern of `patterns` matches, and the tails it refers
    to (characters left, or None for any: `free_names.tail_rules` writes them); None where not representable."""
    parsed = [parsed_pattern(p) for p in patterns]
    if any(p is None for p in parsed):
        return None
    automata: list[Parsed] = [p for p in parsed if p is not None]
    if any(p.nullable and not (p.begins and p.ends) for p in automata):
        return f"{rule} ::= ({_NOTHING})", {}  # a pattern that matches the empty text somewhere matches every name
    names = set(declared)
    prefixes = {name[:depth] for name in names for depth in range(len(name) + 1)}
    start: _Positions = frozenset((i, -1) for i in range(len(automata)))
    unanchored = frozenset((i, -1) for i, p in enumerate(automata) if not p.begins)
    ids: dict[tuple[_Positions, str | None, int], str] = {(start, "", 0): rule}
    tails: dict[int | None, str] = {}
    todo = [(start, "", 0)]
    bodies: dict[str, list[tuple[str, str | None]]] = {}
    loop_tags: dict[str, str] = {}

    def step(positions: _Positions, char: str) -> _Positions | None:
        """The positions after `char`, None once a pattern has matched for good (no `$` after its end)."""
        point, reached = ord(char), set(unanchored)
        for i, p in positions:
            automaton = automata[i].automaton
            for q in automata[i].first if p < 0 else automaton.follow[p]:
                if _holds(automaton.chars[q], point):
                    if q in automata[i].last and not automata[i].ends:
                        return None
                    reached.add((i, q))
        return frozenset(reached)

    loops: Loops = {}
    while todo:
        positions, prefix, written = state = todo.pop()
        ended = any(p >= 0 and p in automata[i].last for i, p in positions)
        if most is not None and prefix is None and not ended:
            kept = [c for c in _REST if step(positions, c) == positions]
            if all(c in kept or step(positions, c) is None for c in _REST):  # `c*` until a pattern matches
                tag = "".join(kept)
                tag = loop_tags.setdefault(tag, str(len(loop_tags)))
                loops[(tag, most - written)] = _union([(ord(c), ord(c)) for c in kept])
                bodies[ids[state]] = [(f"{rule}_loop_{tag}_{most - written}", None)]
                continue
        targets: dict[str, list[str]] = {}
        for char in (_REST if written or prefix != "" else _FIRST) if most is None or written < most else "":
            after = step(positions, char)
            if after is None:
                continue
            child = prefix + char if prefix is not None and prefix + char in prefixes else None
            count = written + 1
            if not after and child is None:
                left = None if most is None else most - count
                target = tails.setdefault(left, f"{rule}_tail_{'any' if left is None else left}") if left != 0 else ""
            else:
                key = (after, child, count if most is not None else 1)
                if key not in ids:
                    ids[key] = f"{rule}_{len(ids)}"
                    todo.append(key)
                target = ids[key]
            targets.setdefault(target, []).append(char)
        alternatives: list[tuple[str, str | None]] = [
            (_text(_union([(ord(c), ord(c)) for c in chars])), target or None)
            for target, chars in sorted(targets.items())
        ]
        if written and prefix not in names and not ended:
            alternatives.append(('""', None))
        bodies[ids[state]] = alternatives
        if len(bodies) > _MOST_STATES:
            return None
    tail_names = set(tails.values())
    live = _productive({name: [(t, None if g in tail_names else g) for t, g in b] for name, b in bodies.items()})
    lines = []
    for name, body in bodies.items():
        kept = [
            f"({text} {target})" if target else f"({text})"
            for text, target in body
            if not target or target in live or target in tail_names
        ]
        if name in live or name == rule:
            lines.append(f"{name} ::= ({' | '.join(kept) or _NOTHING})")
    return "\n".join(lines + loop_rules(loops, rule)), tails
