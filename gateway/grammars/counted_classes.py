"""A JSON string pattern of counted character classes as plain EBNF, which xgrammar compiles in milliseconds.

xgrammar 0.2.9 writes a `pattern` whose strings may hold `"`, `\\` or a control character as a
`Regex("…", json_string=true)` rule, compiled state by state: a counted class costs a token mask per count, ~25 ms
each on a 150k vocabulary (`^.{1,100}$` ~1.5 s of CPU, `^\\S{1,12}$` ~0.13 s). That rule's language is the
pattern's strings with none of those characters (it takes no escape: `"a\\"b"` is refused), so for a pattern that
`Grammar.from_regex` prints as one sequence of character classes (counted or not) and literals, the same language
is that EBNF with `"`, `\\` and U+0000-U+001F taken out of every class. Written so, each class as a negated class
(`[a-z]` as `[^\\x00-\\x60\\x7b-\\U0010ffff]`), a class counted up to the string's closing quote, in the quote's own
rule, compiles in ~5-20 ms whatever its count: xgrammar settles a negated class's count followed by a literal it
excludes at all counts at once, a positive class's never (`[a-z]{1,100}` ~250 ms). Any other shape (groups,
alternatives, `+`), or one with neither a broad class counted nor a long narrow count, is left as it was (None). A
raw XML value (qwen_xml, glm_xml) of such a pattern is the same sequence written up to its closing tag
(`sequence_writer`; safe_json inlines it), and so is a DeepSeek or Kimi raw value (`closed_value`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gateway.grammars.patterns import class_range

_JSON_ESCAPED = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))
"""What a JSON string writes only escaped, which xgrammar's `json_string` regex never writes: controls, `"`, `\\`."""
_SINGLE_ESCAPES = {"0": 0, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13}
_HEX_WIDTHS = {"x": 2, "u": 4, "U": 8}
_ROOT = re.compile(r"^root ::= \(\((.*)\)\)$")
_ITEM = re.compile(r'([A-Za-z_]\w*)(?:\{(\d+), (-?\d+)\})?|"([^"\\]*)"')
_CLASS_RULE = re.compile(r"^([A-Za-z_]\w*) ::= \(\(\[(\^?)((?:[^\]\\]|\\.)*)\]\)\)$")
_NAME = re.compile(r"[A-Za-z_]\w*")
_QUOTED_RULE = re.compile(r'^(\S+) ::= \(\("\\"" (\S+) "\\""\)\)$', re.MULTILINE)
_SEQUENCE_RULE = re.compile(r"^(\S+) ::= \(\(([^()|]*)\)\)$", re.MULTILINE)

_CODE_POINTS = 0x110000
_BROAD = 0x80000
"""A class of at least this many characters is broad (`.`, `[^<]`, `\\S`): xgrammar's own rule for a count of one
costs a mask per count; so does a narrower one's (`[a-z]`, `\\w`) only over a long span (`COSTLY_SPAN`)."""
COSTLY_SPAN = 16
"""A narrow class counted over at least this span (`{m, m + 16}`) costs xgrammar's rule a mask per count."""

_UNZIPPED_COUNT = 128
"""xgrammar 0.2.9 writes a count up to this as a position each; past it (`{0,256}`) a repeat it compiles cheaply."""
_COUNT = re.compile(r"\{(\d+), (-?\d+)\}")

Ranges = list[tuple[int, int]]
Taken = tuple[tuple[int, int], ...]


def repeats_natively(regex_ebnf: str) -> bool:
    """Whether `regex_ebnf` counts past `_UNZIPPED_COUNT` (`.{0,256}`): xgrammar's own regex rule compiles in ~5 ms,
    its printed EBNF or ours (`[a-z]{0,300}`: ~480 and ~60 ms on Qwen3's vocabulary) cost more."""
    return any(int(low) > _UNZIPPED_COUNT or int(high) > _UNZIPPED_COUNT for low, high in _COUNT.findall(regex_ebnf))


def json_string_ebnf(regex_ebnf: str) -> str | None:
    """`regex_ebnf` (xgrammar's `Grammar.from_regex` of a pattern) with `"`, `\\` and controls out of every class,
    each written negated: the language of the pattern's `json_string` regex rule. None unless its root is one
    sequence of class rules and literals with no escape, where a broad class is counted or a narrow one over
    `COSTLY_SPAN` (else xgrammar's rule costs no more)."""
    lines = regex_ebnf.strip().splitlines()
    root = _ROOT.match(lines[0]) if lines else None
    classes = {m[1]: m for m in map(_CLASS_RULE.match, lines[1:]) if m}
    if root is None or len(classes) != len(lines) - 1:
        return None
    counted = counted_sequence(root[1], classes, _JSON_ESCAPED)
    if counted is None:
        return None
    written, rules = counted
    return "\n".join([f"root ::= (({' '.join(written)}))", *rules]) + "\n"


def counted_sequence(
    items_text: str, classes: dict[str, re.Match[str]], taken: Taken, closed: bool = False
) -> tuple[list[str], list[str]] | None:
    """A rule body `items_text` of class rules (`classes`, `_CLASS_RULE` matches) and literals with no escape, with
    the `taken` code points out of every class, each class written negated (`_negated`): the body's items and the
    class rules rewritten. None for any other body, or one where neither a broad class is counted nor a narrow one
    over `COSTLY_SPAN` (`closed`, a raw value closed by its tag: nor one that varies at all, nor a fixed count of
    `COSTLY_SPAN`), where it costs no more as it was."""
    items = list(_ITEM.finditer(items_text))
    if " ".join(m[0] for m in items) != items_text or any(m[1] and m[1] not in classes for m in items):
        return None
    rules, sizes, names = [], {}, {}
    for name in dict.fromkeys(m[1] for m in items if m[1]):
        rule = classes[name]
        ranges = _class_ranges(rule[3])
        if ranges is None:
            return None
        kept = _union(ranges + list(taken)) if rule[2] else _minus(ranges, taken)
        sizes[name] = _size(kept) if not rule[2] else _CODE_POINTS - _size(kept)
        if not sizes[name]:
            return None  # a class with no character left: xgrammar's rule and the EBNF would print differently
        written = _negated(kept, bool(rule[2]))
        names[name] = f"{name}_negated" if written.startswith("[^") and not rule[2] else name  # a rule of its own
        rules.append(f"{names[name]} ::= (({written}))")
    pays = any(m[2] and (sizes[m[1]] >= _BROAD or _costly(int(m[2]), int(m[3]), closed)) for m in items)
    return ([names[m[1]] + m[0][len(m[1]) :] if m[1] else m[0] for m in items], rules) if pays else None


def _costly(least: int, most: int, closed: bool) -> bool:
    """Whether a narrow class's count `least` .. `most` (-1: no most) costs xgrammar more as from_regex writes it
    than negated (`closed`: then counted up to a raw value's closing tag in its rule, which settles any count that
    varies: `[a-z]{2,8}` ~10 -> ~5 ms of compile, a token mask ~0.65 -> ~0.01 ms on DeepSeek's vocabulary; a short
    fixed one, `\\d{3}`, costs more so, ~1 -> ~9 ms)."""
    if closed:
        return most != least or least >= COSTLY_SPAN
    return most - least >= COSTLY_SPAN


def _negated(ranges: Ranges, negated: bool) -> str:
    """The class of `ranges` (their complement, `negated`) written as a negated class: xgrammar settles a count of a
    negated class followed in its rule by a literal starting with a character the class excludes at all counts at
    once (`[^\\x00-\\x60\\x7b-\\U0010ffff]{1,100} "\\""` ~5 ms of compile on Qwen3's vocabulary, ~20 us a token mask),
    never a positive one's (`[a-z]{1,100} "\\""` ~250 ms, ~200 us). A class of every character stays `[^]`-free."""
    excluded = ranges if negated else _minus([(0, _CODE_POINTS - 1)], tuple(ranges))
    if not excluded:
        return "[" + "".join(class_range(low, high) for low, high in ranges) + "]"
    return "[^" + "".join(class_range(low, high) for low, high in excluded) + "]"


def counts_settle(regex_ebnf: str, ends: str) -> bool:
    """Whether in `regex_ebnf` (`Grammar.from_regex`'s, one sequence of classes and literals) each class counted over
    a span (a narrow one: over `COSTLY_SPAN`) is followed by a literal whose first character it does not hold, or
    ends it and holds none of `ends` (what may follow the value): only there does xgrammar settle the count's end
    cheaply (`[^<]{1,100} "x"` costs ~2.5 s to compile on Qwen3's vocabulary, as its own rule does)."""
    lines = regex_ebnf.strip().splitlines()
    root = _ROOT.match(lines[0]) if lines else None
    classes = {m[1]: m for m in map(_CLASS_RULE.match, lines[1:]) if m}
    items = list(_ITEM.finditer(root[1])) if root else []
    if root is None or " ".join(m[0] for m in items) != root[1] or any(m[1] and m[1] not in classes for m in items):
        return False
    for item, after in zip(items, [*items[1:], None], strict=True):
        if not item[1] or not item[2] or item[2] == item[3]:
            continue
        ranges, negated = _class_ranges(classes[item[1]][3]), bool(classes[item[1]][2])
        if ranges is None:
            return False
        narrow = (_CODE_POINTS - _size(ranges) if negated else _size(ranges)) < _BROAD
        if narrow and int(item[3]) - int(item[2]) < COSTLY_SPAN:
            continue  # a short narrow count costs little
        if after is not None and not after[4]:
            return False  # a class follows
        if any(_holds(ranges, negated, c) for c in (ends if after is None else after[4][0])):
            return False
    return True


Written = tuple[str, str | None, list[str]]
"""A raw XML value's sequence: its body, the body that a newline then the closing tag may follow (None: no other
than the body), and the rules they need."""


def sequence_writer(ebnf: str, newline: bool = False, closed: bool = False) -> Callable[[str], Written | None]:
    """For a rule of `ebnf` (followed through rules that only name another, `N ::= ((M))`), its body as
    `counted_sequence` writes it with its classes as they are (`closed`: as a raw value closed by its tag), and the
    rules that body needs that `ebnf` lacks; None as `counted_sequence` (a raw XML value's pattern, which xgrammar writes as from_regex's rules). With `newline`
    (qwen_xml's optional newline before the closing tag) a body ending in `c{m, n}`, `c` holding the newline, is
    followed by the newline only as `c{n}` (the same strings: a shorter value's newline is `c`'s own), chunked,
    so that the newline never continues a count (~2.3 s of compile on Qwen3's vocabulary, ~130 ms chunked)."""
    bodies = {m[1]: m[2] for m in _SEQUENCE_RULE.finditer(ebnf)}
    classes = {m[1]: m for m in map(_CLASS_RULE.match, ebnf.splitlines()) if m}

    def written(name: str) -> Written | None:
        seen = set()
        while _NAME.fullmatch(bodies.get(name, "")) and name not in seen:
            seen.add(name)
            name = bodies[name]
        counted = counted_sequence(bodies[name], classes, (), closed) if name in bodies else None
        if counted is None:
            return None
        items, rules = counted
        last = list(_ITEM.finditer(bodies[name]))[-1]
        before_newline: str | None = " ".join(items)
        if newline and last[2] and _holds_newline(classes[last[1]]):
            most = int(last[3])
            written_class = items[-1].split("{", 1)[0]  # the class as written (negated)
            before_newline = None if most < 0 else " ".join([*items[:-1], _fixed(written_class, most, rules)])
        return " ".join(items), before_newline, [rule for rule in rules if rule.split(" ::= ", 1)[0] not in classes]

    return written


def closed_value(ebnf: str, close: str = "") -> str | None:
    """A raw value's grammar `ebnf` (from_regex's, as `safe_json.raw_pattern_ebnf` gives it) with its root written
    as `sequence_writer` writes it (classes negated), then `close` (an EBNF expression starting with a literal whose
    first character the value cannot hold: DeepSeek's `"</" Token(…) " parameter>\\n"`) in the same rule: xgrammar
    settles the counts there cheaply (`^.{1,100}$` ~20 ms of compile on Qwen3's vocabulary, ~2.4 s with the close in
    another rule). No `close` (Kimi's is a token, which settles nothing): only a count followed by a literal in the
    value is settled (`[a-z]{1,64} "@example.com"` 145 -> 5 ms; one at the value's end costs as before, ~230). With
    a `close`, a short narrow count that varies is written so too (`[a-z]{1,10}` ~24 -> ~5 ms, a token mask ~1.2 ->
    ~0.02 ms on DeepSeek's vocabulary). None where the value stays as it was (not one sequence; no count that costs;
    no close and no class to negate)."""
    counted = sequence_writer(ebnf, closed=bool(close))("root")
    if counted is None:
        return None
    body, _, added = counted
    if not close and not added:
        return None  # every class was negated already: the value as it was
    rules = [line for line in ebnf.strip().splitlines() if not line.startswith("root ::= ")]
    return "\n".join([f"root ::= (({' '.join(filter(None, (body, close)))}))", *rules, *added]) + "\n"


def _holds_newline(rule: re.Match[str]) -> bool:
    ranges = _class_ranges(rule[3])
    return ranges is not None and _holds(ranges, bool(rule[2]), "\n")


def _fixed(name: str, count: int, rules: list[str]) -> str:
    """`name{count, count}` (a class), a long count as chunks of ~sqrt(count) characters: a position each costs a
    token mask where xgrammar cannot settle the count's end (a broad class before a newline it holds)."""
    if count < COSTLY_SPAN:
        return f"{name}{{{count}, {count}}}"
    k = round(count**0.5)
    q, r = divmod(count, k)
    chunk = f"{name}_chunk_{k}"
    rule = f"{chunk} ::= (({name}{{{k}, {k}}}))"
    if rule not in rules:
        rules.append(rule)
    return f"{chunk}{{{q}, {q}}}" + (f" {name}{{{r}, {r}}}" if r else "")


def inlined_into_quotes(ebnf: str, names: set[str]) -> str:
    """`ebnf` with each rule `S ::= (("\\"" N "\\""))`, N one of `names` (a rule `N ::= ((ITEMS))`), written
    `S ::= (("\\"" ITEMS "\\""))`, and N dropped where nothing else refers to it: xgrammar settles a broad class
    counted up to the closing quote at all counts at once only when the quote is in the count's own rule."""
    bodies = {m[1]: m[2] for m in _SEQUENCE_RULE.finditer(ebnf) if m[1] in names}

    def inline(rule: re.Match[str]) -> str:
        body = bodies.get(rule[2])
        return rule[0] if body is None else f'{rule[1]} ::= (("\\"" {body} "\\""))'

    ebnf = _QUOTED_RULE.sub(inline, ebnf)
    for name in bodies:
        if not re.search(rf"(?<![\w]){name}(?![\w])(?! ::=)", ebnf):
            ebnf = re.sub(rf"^{name} ::= .*\n?", "", ebnf, flags=re.MULTILINE)
    return ebnf


def _class_ranges(body: str) -> Ranges | None:
    """The code point ranges of a class body as xgrammar prints it (`a-z`, `\\n`, `\\xa0`, `\\u2028`, `\\]`); None
    for anything else."""
    points: list[int] = []
    ranges: Ranges = []
    i = 0
    while i < len(body):
        point, i = _point(body, i)
        if point is None:
            return None
        if body.startswith("-", i) and i + 1 < len(body):
            high, i = _point(body, i + 1)
            if high is None or high < point:
                return None
            ranges.append((point, high))
        else:
            points.append(point)
    return _union(ranges + [(p, p) for p in points])


def _point(body: str, i: int) -> tuple[int | None, int]:
    """The code point at `body[i]` (a character or an escape) and the index after it."""
    if body[i] != "\\":
        return ord(body[i]), i + 1
    if i + 1 >= len(body):
        return None, i + 1
    c = body[i + 1]
    if c in _SINGLE_ESCAPES:
        return _SINGLE_ESCAPES[c], i + 2
    if c in _HEX_WIDTHS:
        digits = body[i + 2 : i + 2 + _HEX_WIDTHS[c]]
        if len(digits) != _HEX_WIDTHS[c] or not re.fullmatch(r"[0-9a-fA-F]+", digits):
            return None, i + 2
        return int(digits, 16), i + 2 + len(digits)
    if c.isascii() and not c.isalnum():
        return ord(c), i + 2
    return None, i + 2


def _union(ranges: Ranges) -> Ranges:
    out: Ranges = []
    for low, high in sorted(ranges):
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def _holds(ranges: Ranges, negated: bool, char: str) -> bool:
    """Whether the class of `ranges` (their complement, `negated`) holds `char`."""
    return any(low <= ord(char) <= high for low, high in ranges) != negated


def _size(ranges: Ranges) -> int:
    return sum(high - low + 1 for low, high in ranges)


def _minus(ranges: Ranges, taken: Taken) -> Ranges:
    out = ranges
    for t_low, t_high in taken:
        out = [
            piece
            for low, high in out
            for piece in ((low, min(high, t_low - 1)), (max(low, t_high + 1), high))
            if piece[0] <= piece[1]
        ]
    return out


def is_length(value: object) -> bool:
    """Whether `value` is a `minLength` / `maxLength` a grammar counts (an int in 0..2**31; others are ignored)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def bounded_text(low: int, high: int | None, excluded: str) -> str:
    """EBNF for any text of `low`..`high` characters (None: no most) holding none of `excluded`, as from_regex
    prints a counted class (`closed_value` writes it up to a raw value's closing tag)."""
    points = _union([(ord(c), ord(c)) for c in excluded])
    excluded_class = "".join(class_range(a, b) for a, b in points)
    return f"root ::= ((root_1{{{low}, {-1 if high is None else high}}}))\nroot_1 ::= (([^{excluded_class}]))\n"
