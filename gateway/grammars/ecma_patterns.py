"""A JSON Schema `pattern` (ECMA-262, searched: not anchored unless it says so) tested on a listed value with the
`regex` module, where the two dialects read the pattern alike, within a time budget per request.

all_of.py keeps only the `enum` / `const` values a `pattern` beside them admits (xgrammar writes the values alone).
Python's `re` has no time bound (`^(a+)+$` against 28 `a`s and a `!`: 7 s of CPU); `regex` takes a timeout. The
pattern is translated (`translated`) only from syntax both dialects read alike, each piece written so that Python
reads it as ECMA-262 does: `.` as `[^\\n\\r\\u2028\\u2029]`, `$` as `\\Z` (Python's `$` also matches before a final
newline), `\\d` `\\w` `\\s` as ECMA's classes (ASCII digits and word characters, ECMA's whitespace), literals as
code-point escapes, groups as non-capturing, `\\b` under the ASCII flag. Anything else (a backreference,
lookaround, named group, `\\p{…}`, `\\c`, a `{` that is no count, a class with a negated shorthand or a nested `[`,
a quantifier after another…) has no translation: the values are not checked (a gap, all_of.py). So is a value with
a character past U+FFFF or a surrogate (ECMA-262 without the `u` flag reads one as two code units), any search
once the budget's SECONDS are spent, as they are by a pattern that ran out of time before (_TIMED_OUT).
"""

from __future__ import annotations

import re
import time
from functools import lru_cache
from typing import Any

SECONDS = 0.2
"""CPU time the searches of one request's listed values may take in all (each search's timeout, `regex`'s, is
wall-clock: at most what is left)."""
_DIGIT, _WORD = "0-9", "A-Za-z0-9_"
_SPACE = "\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
"""ECMA-262's WhiteSpace and LineTerminator (Python's `\\s` differs: U+001C-U+001F, U+0085 in, U+FEFF out)."""
_SHORTHANDS = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
_CONTROLS = {"n": "\\n", "r": "\\r", "t": "\\t", "f": "\\x0c", "v": "\\x0b"}
_COUNT = re.compile(r"\{(\d{1,4})(,(\d{0,4}))?\}")
_HEX2 = re.compile(r"[0-9A-Fa-f]{2}")
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_WIDE = re.compile("[\\ud800-\\udfff\\U00010000-\\U0010ffff]")
_CLASS_OPERATORS = ("--", "&&", "||", "~~")


class Unchecked(Exception):
    """A pattern not translated, a value not comparable, or the time spent: the values are not checked."""


_TIMED_OUT: dict[str, None] = {}
"""Patterns whose search ran out of time (the latest _MOST_TIMED_OUT): not searched again by any budget (the JSON
grammars fold each value schema of a family's arguments with a budget of its own)."""
_MOST_TIMED_OUT = 256


class PatternSearch:
    """One request's (or schema's) searches: SECONDS in all, each (pattern, value) searched once."""

    def __init__(self, seconds: float = SECONDS) -> None:
        self.left = seconds
        self.found: dict[tuple[str, str], bool] = {}

    def __call__(self, pattern: str, value: str) -> bool:
        """Whether `pattern` matches somewhere in `value` as ECMA-262 reads it; Unchecked where that is not known."""
        key = (pattern, value)
        if key not in self.found:
            self.found[key] = self._search(pattern, value)
        return self.found[key]

    def _search(self, pattern: str, value: str) -> bool:
        compiled = _compiled(pattern)
        if compiled is None:
            raise Unchecked("a pattern whose ECMA-262 and Python readings may differ")
        if _WIDE.search(value):
            raise Unchecked("a value with a character past U+FFFF")
        if pattern in _TIMED_OUT:
            self.left = 0  # as if it ran out of time here again
        if self.left <= 0:
            raise Unchecked(f"more than {SECONDS} s of pattern searches")
        start = time.thread_time()  # the budget counts this thread's CPU time: the same on a loaded machine
        try:
            return compiled.search(value, timeout=self.left) is not None
        except TimeoutError:
            self.left = 0
            _TIMED_OUT[pattern] = None
            if len(_TIMED_OUT) > _MOST_TIMED_OUT:
                del _TIMED_OUT[next(iter(_TIMED_OUT))]
            raise Unchecked(f"more than {SECONDS} s of pattern searches") from None
        finally:
            self.left -= time.thread_time() - start


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    """`pattern` compiled by `regex` as ECMA-262 reads it; None where it has no translation."""
    import regex  # imported here: only values beside a pattern need it

    text = translated(pattern)
    if text is None:
        return None
    try:
        return regex.compile(text, regex.ASCII | regex.VERSION0)
    except (regex.error, OverflowError, RecursionError):
        return None


def translated(pattern: str) -> str | None:
    """`pattern` in the `regex` module's syntax (with its ASCII flag) matching what ECMA-262 matches; None where
    the dialects may differ."""
    try:
        return _Translator(pattern).run()
    except _Untranslated:
        return None


class _Untranslated(Exception):
    pass


class _Translator:
    """One pass over a pattern, writing each piece in Python's reading."""

    def __init__(self, pattern: str) -> None:
        self.pattern, self.i, self.out = pattern, 0, []
        self.depth = 0
        self.quantifiable = False  # whether the piece just written may take a quantifier

    def run(self) -> str:
        while self.i < len(self.pattern):
            self._piece()
        if self.depth:
            raise _Untranslated
        return "".join(self.out)

    def _take(self) -> str:
        if self.i >= len(self.pattern):
            raise _Untranslated
        char = self.pattern[self.i]
        self.i += 1
        return char

    def _write(self, text: str, quantifiable: bool) -> None:
        self.out.append(text)
        self.quantifiable = quantifiable

    def _piece(self) -> None:
        char = self._take()
        if char in "*+?" or (char == "{" and _COUNT.match(self.pattern, self.i - 1)):
            self._quantifier(char)
        elif char == "{":
            raise _Untranslated  # ECMA-262 reads a `{` that is no count as itself; Python may read `{,n}` as one
        elif char == "(":
            if self.pattern.startswith("?", self.i):
                if not self.pattern.startswith("?:", self.i):
                    raise _Untranslated  # lookaround, named group, inline flags
                self.i += 2
            self.depth += 1
            self._write("(?:", False)
        elif char == ")":
            if not self.depth:
                raise _Untranslated
            self.depth -= 1
            self._write(")", True)
        elif char == "|":
            self._write("|", False)
        elif char == "^":
            self._write("^", False)
        elif char == "$":
            self._write("\\Z", False)
        elif char == ".":
            self._write("[^\\n\\r\\u2028\\u2029]", True)
        elif char == "[":
            self._write(self._class(), True)
        elif char == "\\":
            self._escape()
        else:
            self._write(_literal(char), True)

    def _quantifier(self, char: str) -> None:
        if not self.quantifiable:
            raise _Untranslated  # nothing to repeat: ECMA-262 refuses it (Annex B reads some as literals)
        if char == "{":
            count = _COUNT.match(self.pattern, self.i - 1)
            low, high = count.group(1), count.group(3)
            if high and int(high) < int(low):
                raise _Untranslated
            self.i = count.end()
            char = count.group(0)
        if self.pattern.startswith("?", self.i):
            self.i += 1
            char += "?"
        self._write(char, False)  # a quantifier after it: possessive in Python, refused by ECMA-262

    def _escape(self) -> None:
        char = self._take()
        if char.lower() in _SHORTHANDS:
            self._write(f"[{'^' if char.isupper() else ''}{_SHORTHANDS[char.lower()]}]", True)
        elif char in "bB":
            self._write("\\" + char, False)
        else:
            self._write(self._escaped_char(char), True)

    def _escaped_char(self, char: str) -> str:
        """The character an escape (`\\` then `char`) stands for outside a class and in one, but shorthands and
        `\\b`; _Untranslated where the dialects may read it apart."""
        if char in _CONTROLS:
            return _CONTROLS[char]
        if char == "0" and not self.pattern[self.i : self.i + 1].isdigit():
            return "\\x00"
        if char in "xu":
            hexes = (_HEX2 if char == "x" else _HEX4).match(self.pattern, self.i)
            if hexes is None:
                raise _Untranslated  # Annex B reads `\x`, `\u` without their digits as letters
            point = int(hexes.group(0), 16)
            if 0xD800 <= point <= 0xDFFF:
                raise _Untranslated
            self.i = hexes.end()
            return _literal(chr(point))
        if char.isascii() and not char.isalnum() and char.isprintable() and char != " ":
            return _literal(char)  # an identity escape of punctuation: the character itself in both
        raise _Untranslated  # a backreference, `\c`, `\k`, `\p`, `\A`, `\Z`, an identity escape of a letter

    def _class(self) -> str:
        """A class `[…]` whose `[` was read: each member as a code-point escape, a shorthand as its ranges."""
        negated = self.pattern.startswith("^", self.i)
        self.i += negated
        members: list[str] = []  # a character's escape, "-", or a shorthand's ranges in brackets
        while True:
            char = self._take()
            if char == "]":
                break
            if char == "[" or self.pattern.startswith(_CLASS_OPERATORS, self.i - 1):
                raise _Untranslated  # nested classes and set operations: `regex`'s and Python's own readings
            if char == "\\":
                char = self._take()
                if char in _SHORTHANDS:
                    members.append(f"[{_SHORTHANDS[char]}]")
                    continue
                if char.lower() in _SHORTHANDS:
                    raise _Untranslated  # a negated shorthand in a class
                members.append("\\x08" if char == "b" else self._escaped_char(char))
            else:
                members.append("-" if char == "-" else _literal(char))
        if not members:
            raise _Untranslated  # `[]` matches nothing, `[^]` anything, in ECMA-262; Python reads `]` on
        for k, member in enumerate(members):
            if member == "-" and 0 < k < len(members) - 1 and "[" in members[k - 1] + members[k + 1]:
                raise _Untranslated  # a range from or to a shorthand: a literal `-` in Annex B, an error in Python
        body = "".join(m[1:-1] if m.startswith("[") else m for m in members)
        return f"[{'^' if negated else ''}{body}]"


def _literal(char: str) -> str:
    """A character as itself: a letter, digit or `_` as is, any other as a code-point escape."""
    if char.isascii() and (char.isalnum() or char == "_"):
        return char
    point = ord(char)
    if 0xD800 <= point <= 0xDFFF or point > 0xFFFF:
        raise _Untranslated  # ECMA-262 without the `u` flag reads it as two code units
    return f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}"
