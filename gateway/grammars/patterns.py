"""What a JSON-schema `pattern` can produce, read from its source without running it.

The grammars that keep control tokens out of values (safe_json.py) need one
fact about a pattern before they let xgrammar enforce it as text: whether any string it matches can hold one of
the first characters of the control-token spellings (`<`, or `[` for Mistral: a pattern that cannot write them
cannot write a control token either). The scan over-approximates: every character class, `.`,
escape and literal counts wherever it appears, so "cannot hold `<`" is never
wrong; a pattern it does not understand is reported as None. It also reports
whether the pattern is anchored at both ends (`^…$` with no top-level `|`,
which is how JSON Schema's search semantics become xgrammar's full match) and
the largest repetition count (`{n}`, `{n,m}`), which drives compile cost.

`narrowed` rewrites a pattern that can write those characters into one that cannot and matches only strings the
pattern matches: each `.`, class escape and class that could match one excludes them (`\\S` → `[^\\s<]`); a
literal that spells one cannot be narrowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CLASS_ESCAPES = {"d": False, "w": False, "s": False, "D": True, "W": True, "S": True}
"""Class escapes and whether they match a scanned character (ASCII punctuation, which `\\d`, `\\w`, `\\s` never match)."""
_PUNCTUATION = re.compile(r"[^\w\s]", re.ASCII)
_CONTROL_POINTS = {"n": 10, "r": 13, "t": 9, "f": 12, "v": 11, "0": 0, "b": 8}
_CONTROL_ESCAPES = frozenset("nrtfv0")
_HEX = frozenset("0123456789abcdefABCDEF")
_QUANTIFIER = re.compile(r"\{(\d+)(?:,(\d*))?\}")


@dataclass(frozen=True)
class PatternFacts:
    anchored: bool
    """`^` first, an unescaped `$` last, no `|` outside groups."""
    may_match: bool
    """Some string the pattern matches may contain one of the scanned characters (`<` unless told)."""
    largest_count: int
    """The largest bound of a counted repetition (0 when there is none)."""


class _Unknown(Exception):
    """Syntax the scan does not follow."""


def scan(pattern: str, chars: str = "<") -> PatternFacts | None:
    """The facts of `pattern` about `chars` (ASCII punctuation); None when its syntax is not understood."""
    try:
        return _scanner(pattern, chars).run()
    except _Unknown:
        return None


def narrowed(pattern: str, chars: str = "<") -> str | None:
    """`pattern` rewritten so that no string it matches holds one of `chars` (ASCII punctuation), every string it
    matches one `pattern` matches: `.`, class escapes and classes that could match them exclude them. None when a
    literal (or a class escape inside a class) matches one, or the syntax is not understood."""
    scanner = _scanner(pattern, chars)
    try:
        scanner.run()
    except _Unknown:
        return None
    if scanner.stuck:
        return None
    out, at = [], 0
    for start, end, text in scanner.edits:
        out += [pattern[at:start], text]
        at = end
    result = "".join(out) + pattern[at:]
    facts = scan(result, chars)
    return result if facts is not None and not facts.may_match else None


def _scanner(pattern: str, chars: str) -> _Scanner:
    if not chars or not all(c.isascii() and _PUNCTUATION.fullmatch(c) for c in chars):
        raise ValueError("the scanned characters must be ASCII punctuation")
    return _Scanner(pattern, frozenset(map(ord, chars)))


def _class_char(point: int) -> str:
    """A code point as a character class member, escaped unless it is a letter or digit: `\\uHHHH`, never `\\xHH`,
    which xgrammar reads greedily (`[^\\x3ca]` is `[^\\u03ca]`: `<` allowed)."""
    if point < 0x80 and chr(point).isalnum():
        return chr(point)
    return f"\\u{point:04x}" if point < 0x10000 else chr(point)


def class_range(low: int, high: int) -> str:
    """`low`..`high` as character class text, for xgrammar's regexes and EBNF alike."""
    return _class_char(low) if low == high else f"{_class_char(low)}-{_class_char(high)}"


class _Scanner:
    def __init__(self, pattern: str, points: frozenset[int]):
        self.p = pattern
        self.points = points
        self.i = 0
        self.hit = False
        self.count = 0
        self.depth = 0
        self.top_level_or = False
        self.inner_anchor = False
        self.edits: list[tuple[int, int, str]] = []
        """Spans of the pattern and their narrowed text (`narrowed`), in order."""
        self.stuck = False
        """A literal matches a scanned character: no narrowing."""

    def _excluded(self) -> str:
        return "".join(_class_char(point) for point in sorted(self.points))

    def run(self) -> PatternFacts:
        p = self.p
        starts = ends = False
        while self.i < len(p):
            c = p[self.i]
            self.i += 1
            if c == "\\":
                self._outer_escape()
            elif c == "[":
                self.hit |= self._char_class()
            elif c == ".":
                self.hit = True
                self.edits.append((self.i - 1, self.i, f"[^\\n\\r\\u2028\\u2029{self._excluded()}]"))
            elif c == "(":
                self.depth += 1
                self._group_head()
            elif c == ")":
                self.depth -= 1
                if self.depth < 0:
                    raise _Unknown
            elif c == "|":
                self.top_level_or |= self.depth == 0
            elif c == "{":
                self._counted()
            elif c == "^" and self.i == 1:
                starts = True
            elif c == "$" and self.i == len(p):
                ends = self.i > 1
            elif c in "^$":
                self.inner_anchor = True
            elif ord(c) in self.points:
                self.hit = self.stuck = True
        if self.depth:
            raise _Unknown
        anchored = starts and ends and not self.top_level_or and not self.inner_anchor
        return PatternFacts(anchored, self.hit, self.count)

    def _outer_escape(self) -> None:
        """An escape outside a class: a class escape that matches a scanned character is narrowed
        (`\\S` → `[^\\s<]`); a literal one cannot be."""
        start = self.i - 1
        point, matches = self._escape(in_class=False)
        if not matches:
            return
        self.hit = True
        if point is not None:
            self.stuck = True
        else:
            self.edits.append((start, self.i, f"[^\\{self.p[self.i - 1].lower()}{self._excluded()}]"))

    def _group_head(self) -> None:
        """Consumes `?:` or `?<name>` after `(`; lookarounds and other `(?` forms are not followed."""
        p, i = self.p, self.i
        if not p.startswith("?", i):
            return
        if p.startswith("?:", i):
            self.i = i + 2
        elif p.startswith("?<", i) and not p.startswith(("?<=", "?<!"), i) and p.find(">", i) > 0:
            self.i = p.find(">", i) + 1
        else:
            raise _Unknown

    def _counted(self) -> None:
        m = _QUANTIFIER.match(self.p, self.i - 1)
        if m is None:  # a literal "{"
            return
        self.count = max(self.count, int(m.group(1)), int(m.group(2) or 0))
        self.i = m.end()

    def _escape(self, in_class: bool) -> tuple[int | None, frozenset[int]]:
        """The escape after a backslash at `self.i`: (its code point, None for a class escape; the scanned
        characters it matches). Consumes it."""
        if self.i >= len(self.p):
            raise _Unknown
        c = self.p[self.i]
        self.i += 1
        if c in _CLASS_ESCAPES:
            return None, self.points if _CLASS_ESCAPES[c] else frozenset()
        if c in "xu":
            return self._literal(self._code_point(c))
        if c in _CONTROL_ESCAPES or (c == "b" and in_class):
            return _CONTROL_POINTS[c], frozenset()
        if c == "c" and self.i < len(self.p) and self.p[self.i].isascii() and self.p[self.i].isalpha():
            self.i += 1
            return ord(self.p[self.i - 1]) % 32, frozenset()
        if c.isalnum():  # \b \B \p{…} \k<…> \1 …: assertions and escapes the scan does not model
            raise _Unknown
        return self._literal(ord(c))

    def _literal(self, point: int) -> tuple[int, frozenset[int]]:
        return point, self.points & {point}

    def _code_point(self, kind: str) -> int:
        """The code point of a `\\xHH`, `\\uHHHH` or `\\u{H…}` escape, after its letter; consumes it."""
        p, i = self.p, self.i
        if kind == "u" and p.startswith("{", i):
            end = p.find("}", i)
            if end < 0:
                raise _Unknown
            digits, self.i = p[i + 1 : end], end + 1
        else:
            width = 2 if kind == "x" else 4
            digits, self.i = p[i : i + width], i + width
            if len(digits) != width:
                raise _Unknown
        if not digits or any(ch not in _HEX for ch in digits):
            raise _Unknown
        return int(digits, 16)

    def _class_atom(self) -> tuple[int | None, frozenset[int]]:
        """One class member at `self.i`: (its code point, None for a class escape; the scanned characters it
        matches)."""
        c = self.p[self.i]
        self.i += 1
        if c == "\\":
            return self._escape(in_class=True)
        return self._literal(ord(c))

    def _char_class(self) -> bool:
        """Whether the class after `[` can match a scanned character (`[]` matches nothing, `[^]` anything): a
        negated one unless it lists every scanned character; consumes it, and notes its narrowed text."""
        p, start = self.p, self.i - 1
        negated = p.startswith("^", self.i)
        self.i += negated
        listed: frozenset[int] = frozenset()
        kept: list[str] = []
        while True:
            if self.i >= len(p):
                raise _Unknown
            if p[self.i] == "]":
                self.i += 1
                hit = listed != self.points if negated else bool(listed)
                if hit:
                    self._narrow_class(start, negated, kept)
                return hit
            at = self.i
            low, matches = self._class_atom()
            high = low
            if low is not None and p.startswith("-", self.i) and self.i + 1 < len(p) and p[self.i + 1] != "]":
                self.i += 1
                high, _ = self._class_atom()
                if high is None or high < low:
                    raise _Unknown
                matches = frozenset(point for point in self.points if low <= point <= high)
            listed |= matches
            if not matches:
                kept.append(p[at : self.i])
            elif low is None:
                kept.append("")  # a class escape with a scanned character inside a class: no narrowing
                self.stuck |= not negated
            else:
                kept += self._split(low, high)

    def _split(self, low: int, high: int) -> list[str]:
        """The range low..high without the scanned characters, as class members."""
        pieces, at = [], low
        for point in sorted(q for q in self.points if low <= q <= high):
            if at < point:
                pieces.append(class_range(at, point - 1))
            at = point + 1
        if at <= high:
            pieces.append(class_range(at, high))
        return pieces

    def _narrow_class(self, start: int, negated: bool, kept: list[str]) -> None:
        """Notes the class from `start` to here narrowed: a negated one with the scanned characters added, a plain
        one with its members but those."""
        if negated:
            body = self.p[start + 2 : self.i - 1]
            body = "\\-" + body[1:] if body.startswith("-") else body  # not read as a range after the added ones
            self.edits.append((start, self.i, f"[^{self._excluded()}{body}]"))
        elif any(kept):
            self.edits.append((start, self.i, "[" + "".join(kept) + "]"))
        else:
            self.stuck = True
