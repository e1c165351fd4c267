"""EBNF for a free parameter name (`additionalProperties`) that no `patternProperties` key of its object matches.

JSON Schema types a name by `additionalProperties` only where neither `properties` nor `patternProperties` claims
it, so the free names of an object with pattern keys are the name class (`[a-zA-Z_] [a-zA-Z0-9_]*`, at most `most`
characters) less its declared names and less every name a pattern matches. A pattern is searched (matched
anywhere unless `^` opens it, up to the end only where `$` closes it), so the rules are a deterministic walk of the
patterns' position automata (`key_patterns.Parsed`, one set of positions for them all) with the declared names'
trie and, when bounded, a count of the characters: a name may end where no pattern has matched and its text is no
declared name, and a walk whose patterns can no longer match, off the trie, goes on as any name characters
(`free_names`' tails). Bounded, a state off the trie that some characters leave as it is and the others end
(a pattern matched) or leave for good (no pattern can match after: any name characters follow) is a count in
blocks of 8 (`_chain_rules`: 64 chained states for `^[a-z_0-9]+$` cost ~600 ms to compile on Qwen3's vocabulary),
the names it takes up to 7 short of `most` as the tails. The walk reads the name class's 63 characters one by one and joins those of one target
into a class. None where a pattern's syntax is not followed or the walk passes `key_patterns._MOST_STATES` (the
caller keeps the names less the declared ones: a gap, refused under strict).
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.grammars.counted_classes import _union
from gateway.grammars.key_patterns import (
    _MOST_STATES,
    _NOTHING,
    Parsed,
    _holds,
    _productive,
    _text,
    parsed_pattern,
    shared_bound,
)

_BLOCK = 8
_FIRST = "ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
_REST = "0123456789" + _FIRST
_Positions = frozenset[tuple[int, int]]
"""(pattern, position) pairs a walk may be at; position -1 a pattern's start."""
_Chain = tuple[str, str, bool, str | None]
"""A chain's kept characters, its exits, whether a name may end in it, and the chain its exits lead to (None:
any characters)."""


def unmatched_name_rules(
    patterns: Iterable[str], declared: Iterable[str], most: int | None, rule: str
) -> tuple[str, dict[int | None, str]] | None:
    """EBNF rules, `rule` the one to reference, for a name of the free-name class of at most `most` characters (any
    number when None) that is none of `declared` and that no pattern of `patterns` matches, and the tails it refers
    to (characters left, or None for any: `free_names.unclaimed_name_rules` writes them); None where not representable."""
    parsed = [parsed_pattern(p) for p in patterns]
    if any(p is None for p in parsed):
        return None
    automata: list[Parsed] = [p for p in parsed if p is not None]
    if any(p.nullable and not (p.begins and p.ends) for p in automata):
        return f"{rule} ::= ({_NOTHING})", {}  # a pattern that matches the empty text somewhere matches every name
    names: set[str] = set()
    start: _Positions = frozenset((i, -1) for i in range(len(automata)))
    unanchored = frozenset((i, -1) for i, p in enumerate(automata) if not p.begins)
    ids: dict[tuple[_Positions, str | None, int], str] = {(start, "", 0): rule}
    tails: dict[int | None, str] = {}
    todo = [(start, "", 0)]
    bodies: dict[str, list[tuple[str, str | None]]] = {}
    kinds: dict[_Chain, str] = {}
    chain_of: dict[_Positions, str | None] = {}

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

    def ended(positions: _Positions) -> bool:
        return any(p >= 0 and p in automata[i].last for i, p in positions)

    def chain(positions: _Positions) -> str | None:
        """The tag of the chain a state off the trie at `positions` is (`_chain_rules`), None where it is none."""
        if positions not in chain_of:
            chain_of[positions] = None  # a cycle through other positions is no chain
            moves = {c: step(positions, c) for c in _REST}
            kept = "".join(c for c, after in moves.items() if after == positions)
            exits = "".join(c for c, after in moves.items() if after is not None and after != positions)
            afters = {moves[c] for c in exits}
            then = chain(next(iter(afters))) if len(afters) == 1 and next(iter(afters)) else None
            if kept and len(afters) <= 1 and (exits or not ended(positions)) and (then or not any(afters)):
                kind = (kept, exits, not ended(positions), then)
                chain_of[positions] = kinds.setdefault(kind, str(len(kinds)))
        return chain_of[positions]

    for name in declared:  # a name a pattern matches is no free name anyway: its trie would cost for nothing
        positions: _Positions | None = start
        for char in name:
            positions = step(positions, char) if positions is not None else None
        if positions is not None and not ended(positions):
            names.add(name)
    prefixes = {name[:depth] for name in names for depth in range(len(name) + 1)}
    chains: set[tuple[str, int]] = set()
    while todo:
        positions, prefix, written = state = todo.pop()
        tag = chain(positions) if most is not None and prefix is None else None
        if tag is not None and most is not None:
            bodies[ids[state]] = [(f"{rule}_chain_{tag}_{most - written}", None)]
            chains.add((tag, most - written))
            continue
        targets: dict[str, list[str]] = {}
        for char in (_REST if written or prefix != "" else _FIRST) if most is None or written < most else "":
            after = step(positions, char)
            if after is None:
                continue
            child = prefix + char if prefix is not None and prefix + char in prefixes else None
            count = written + 1
            if not after and child is None:
                left = None if most is None else shared_bound(most - count)
                target = tails.setdefault(left, f"{rule}_tail_{'any' if left is None else left}") if left != 0 else ""
            else:
                key = (after, child, count if most is not None else 1)
                if key not in ids:
                    ids[key] = f"{rule}_{len(ids)}"
                    todo.append(key)
                target = ids[key]
            targets.setdefault(target, []).append(char)
        alternatives: list[tuple[str, str | None]] = [
            (_class("".join(chars)), target or None) for target, chars in sorted(targets.items())
        ]
        if written and prefix not in names and not ended(positions):
            alternatives.append(('""', None))
        bodies[ids[state]] = alternatives
        if len(bodies) > _MOST_STATES:
            return None
    bodies = _merged(bodies)
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
    return "\n".join(lines + _chain_rules(chains, {tag: kind for kind, tag in kinds.items()}, tails, rule)), tails


def _chain_rules(
    chains: set[tuple[str, int]], kinds: dict[str, _Chain], tails: dict[int | None, str], rule: str
) -> list[str]:
    """`{rule}_chain_T_N`: up to N characters of a state off the trie that `kept` characters leave as it is and
    `exits` leave for one other state (a chain too, or none: any characters follow), the others ending the name (a
    pattern matched): in blocks of 8 as the tails, `k{a} e` then the next chain of at most N - a - 1 characters
    (`_exits`), the end where the state may end, or `k{8}`
    and the chain of N - 8."""
    lines, todo, done = [], sorted(chains), set()
    while todo:
        tag, left = todo.pop()
        if (tag, left) in done:
            continue
        done.add((tag, left))
        kept, exits, ends, then = kinds[tag]
        k = _class(kept)
        alternatives = [f"({k}{{0, {min(left, _BLOCK - 1)}}})"] if ends else []
        for kept_most, rest in _exits(left) if exits else ():
            if then is not None:
                todo.append((then, rest))
                after = f" {rule}_chain_{then}_{rest}"
            else:
                after = f" {tails.setdefault(rest, f'{rule}_tail_{rest}')}" if rest else ""
            alternatives.append(f"({k}{{{kept_most}}} {_class(exits)}{after})")
        if left >= _BLOCK:
            todo.append((tag, left - _BLOCK))
            alternatives.append(f"({k}{{{_BLOCK}}} {rule}_chain_{tag}_{left - _BLOCK})")
        lines.append(f"{rule}_chain_{tag}_{left} ::= ({' | '.join(alternatives) or _NOTHING})")
    return lines


def _merged(bodies: dict[str, list[tuple[str, str | None]]]) -> dict[str, list[tuple[str, str | None]]]:
    """`bodies` with states of equal alternatives one rule (the first: the start stays), until none are equal: the
    trie's nodes whose names to come are alike, as `free_names` shares them."""
    while True:
        first: dict[tuple[tuple[str, str | None], ...], str] = {}
        alias = {name: first.setdefault(tuple(body), name) for name, body in bodies.items()}
        alias = {name: kept for name, kept in alias.items() if kept != name}
        if not alias:
            return bodies
        bodies = {n: [(t, alias.get(g, g) if g else g) for t, g in b] for n, b in bodies.items() if n not in alias}


def _exits(left: int) -> list[tuple[int, int]]:
    """How a chain of `left` characters to go may leave within its block: `a` kept characters, an exit, then at most
    `left - a - 1` more (up to 7 short of it where 8 or more are left: `free_names.shared_bound`)."""
    return [(kept, shared_bound(left - 1 - kept)) for kept in range(min(left, _BLOCK))]


def _class(chars: str) -> str:
    return _text(_union([(ord(c), ord(c)) for c in chars]))
