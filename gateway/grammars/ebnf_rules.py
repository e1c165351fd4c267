"""Rewrites of xgrammar's printed EBNF that keep its language and cost less to compile.

xgrammar 0.2.9 computes a token mask at every scannable position of every rule, and each one builds an Earley
parser sized by the grammar's rule count: compile time grows with positions x rules, and beyond that with what a
position's tokens can reach. Its JSON schema conversion writes an object's optional members as a chain
`part_k ::= ((part_k+1) | (", " member part_k+1))`: a token that ends a member's value continues, inside the same
rule, into every later optional member (n - k of them), so 2,000 optional integers take ~4 s to compile on a
150k vocabulary and 500 optional pattern strings ~6 s (bench/RESULTS.md). Two rewrites, each exact:

* `optional_tails`: `A ::= ((T) | (P X T))` becomes `A ::= ((A_opt T))`, `A_opt ::= ("" | (P A_member))`,
  `A_member ::= ((X))`: the same strings (`(ε | P X) T`), and the alternative that writes the member first,
  `(X T)`, becomes `(A_member T)`. The member's text is compiled once, in a rule that ends at its value and that
  xgrammar gives no lookahead, so a position's tokens stop there (2,000 optional integers: ~0.6 s; qwen_xml's 500:
  ~0.3 s). Declared order, each member at most once and any subset stay as they were.
* `merged_rules`: rules with equal bodies (and lookaheads) are one rule, the others' references renamed to it, in
  one post-order pass: xgrammar writes each property's value rules anew (500 parameters of one `pattern`: 500
  regex rules, ~11 ms each to compile). Equal right-hand sides define equal languages, so the grammar's language
  is unchanged; `root` keeps its name.
* `shared_text`: text that many rules write word for word (the XML styles' tags around each parameter,
  `"<parameter=NAME" ">" ("\n" | "")` … `("\n" | "") "</parameter>"`) is one rule each, referred to: a member
  then adds only its name's characters to the positions xgrammar computes masks at (qwen_xml's 2,000 optional
  integers: 3.2 s -> 1.1 s). A reference to a rule whose body is the replaced elements is the same language.

The printed form is read rule by rule (a rule starts a line with `name ::=`; a TagDispatch may span lines); a
rule whose body does not parse as expected is left as it is.
"""

from __future__ import annotations

import re

_NAME_TEXT = r"[A-Za-z_][A-Za-z0-9_]*"
"""A rule name (an identifier) of xgrammar's EBNF, as a regex."""
RULE_NAME = re.compile(_NAME_TEXT)
_LITERAL_TEXT = r'(?:[^"\\]|\\.)'
_LITERAL_OR_CLASS = rf'"{_LITERAL_TEXT}*"|\[(?:[^\]\\]|\\.)*\]'
_RULE_START = re.compile(rf"^({_NAME_TEXT}) ::= ", re.MULTILINE)
_PARTS = re.compile(rf"{_LITERAL_OR_CLASS}|{_NAME_TEXT}|\S")
"""A string literal, a character class, an identifier, or any other non-blank character of an EBNF body."""


def cheaper_rules(ebnf: str) -> str:
    """`ebnf` (xgrammar's printed form) with the same language: optional tails as rules, equal rules merged."""
    return merged_rules(optional_tails(ebnf))


def shared_text(ebnf: str, sequences: tuple[str, ...], literal_heads: tuple[str, ...] = ()) -> str:
    """`ebnf` with each of `sequences` (printed elements of one sequence, e.g. `">" ("\\n" | "")`), where a rule
    body holds it as whole elements, a reference to one new rule holding it; and each string literal that starts
    with one of `literal_heads` (text with no escape or quote, e.g. `<parameter=`) and goes on, a reference to a
    rule of the head, then a literal of the rest. A `TagDispatch(…)` or `Regex(…)` rule stays as it is."""
    rules = _rules(ebnf)
    names = {name for name, _ in rules}
    shared_texts = (*sequences, *(f'"{h}"' for h in literal_heads))
    texts = {text: _new_name(f"shared_text_{i}", names) for i, text in enumerate(shared_texts)}
    end = r"(?=[ )]|$)"  # the next element, the group's end, or the body's: not a repetition of the last one
    whole = "|".join(re.escape(s) for s in sequences) or "(?!)"
    heads = "|".join(re.escape(h) for h in literal_heads) or "(?!)"
    pieces = re.compile(
        rf'(?<![^ (])(?:(?P<whole>{whole})|"(?P<head>{heads})(?P<rest>{_LITERAL_TEXT}+)"){end}|{_LITERAL_OR_CLASS}'
    )

    def shared(m: re.Match[str]) -> str:
        if m["whole"] is not None:
            return texts[m["whole"]]
        if m["head"] is not None:
            return texts['"' + m["head"] + '"'] + f' "{m["rest"]}"'
        return m[0]

    out = [(name, body if body.startswith(_CALLS) else pieces.sub(shared, body)) for name, body in rules]
    used = {word for _, body in out for word in RULE_NAME.findall(body)}
    return _text([*out, *((rule, f"(({text}))") for text, rule in texts.items() if rule in used)])


_CALLS = ("TagDispatch(", "Regex(")
"""A string literal or a character class, matched whole so that no piece is found inside one."""


def prefixed_rules(ebnf: str, prefix: str) -> str:
    """`ebnf` with every rule it defines renamed `prefix` + its name (where defined and where referred to)."""
    defined = set(_RULE_START.findall(ebnf))
    return "".join(prefix + p if p in defined else p for p in _EBNF_PARTS.findall(ebnf))


_EBNF_PARTS = re.compile(rf"{_LITERAL_OR_CLASS}|{_NAME_TEXT}|.", re.DOTALL)
"""A string literal, a character class, an identifier, or any other character of an EBNF grammar."""


def _rules(ebnf: str) -> list[tuple[str, str]]:
    """(name, body) of each rule, in order."""
    split = _RULE_START.split(ebnf)  # text before the first rule, then name, body, name, body, ...
    return [(split[i], split[i + 1].rstrip()) for i in range(1, len(split), 2)]


def _text(rules: list[tuple[str, str]]) -> str:
    return "".join(f"{name} ::= {body}\n" for name, body in rules)


def optional_tails(ebnf: str) -> str:
    """Each rule `A ::= ((T) | (P X T))` (T a rule name) as `A ::= ((A_opt T))`, `A_opt ::= ("" | (P A_member))`
    and `A_member ::= ((X))`, where `(X T)` is an alternative of another rule (the member written first, without
    its separator P), which becomes `(A_member T)`; with no such alternative, X is all of `P X`. A member's text is
    then compiled once, in a rule that ends another rule's sequence, which xgrammar gives no lookahead: a token
    crossing the member's end stops there (with the tail as its lookahead it walked every later member: XML's
    whitespace-led members compiled 14x slower)."""
    rules = _rules(ebnf)
    names = {name for name, _ in rules}
    parts = {name: split for name, body in rules if (split := _optional_tail(body)) is not None}
    by_tail = {tail: name for name, (_, tail) in parts.items()}
    member_rule = {part: _new_name(f"{part}_member", names) for part in parts}
    firsts: dict[str, str] = {}  # part -> its member's text as another rule's alternative writes it first

    def shared(alternative: re.Match[str]) -> str:
        text, tail = alternative[1], alternative[2]
        part = by_tail.get(tail)
        if part is None or part in firsts or not parts[part][0].endswith(" " + text) or not _one_sequence(text):
            return alternative[0]
        firsts[part] = text
        return f"({member_rule[part]} {tail})"

    rewritten = {name: body if name in parts or not parts else _ALTERNATIVE.sub(shared, body) for name, body in rules}
    out: list[tuple[str, str]] = []
    for name, _ in rules:
        if name not in parts:
            out.append((name, rewritten[name]))
            continue
        member, tail = parts[name]
        text = firsts.get(name, member)
        separator = member[: len(member) - len(text)].rstrip()
        optional = _new_name(f"{name}_opt", names)
        out += [
            (name, f"(({optional} {tail}))"),
            (optional, f'("" | ({separator} {member_rule[name]}))' if separator else f'("" | ({member_rule[name]}))'),
            (member_rule[name], f"(({text}))"),
        ]
    return _text(out)


_ALTERNATIVE = re.compile(rf"(?:(?<=^\()|(?<=\) \| ))\((.+?) ({_NAME_TEXT})\)(?=\)$| \| \()")
"""A top-level alternative `(X T)` of a rule body `((…) | (…))` ending in a rule name T (checked by the caller)."""


def _one_sequence(text: str) -> bool:
    """Whether `text` is one sequence: balanced parentheses, no alternative at its top level."""
    depth = 0
    for part in _PARTS.findall(text):
        depth += {"(": 1, ")": -1}.get(part, 0)
        if depth < 0 or (depth == 0 and part == "|"):
            return False
    return depth == 0


def _new_name(name: str, names: set[str]) -> str:
    """`name`, or it with underscores added, not in `names` (added to them)."""
    while name in names:
        name += "_"
    names.add(name)
    return name


def _optional_tail(body: str) -> tuple[str, str] | None:
    """(X, T) when `body` is `((T) | (X T))` with nothing after it (no lookahead), else None."""
    shape = _OPTIONAL_TAIL.fullmatch(body)
    return (shape[2], shape[1]) if shape is not None and _one_sequence(shape[2]) else None


_OPTIONAL_TAIL = re.compile(rf"\(\(({_NAME_TEXT})\) \| \((.+) \1\)\)", re.DOTALL)


def merged_rules(ebnf: str) -> str:
    """`ebnf` with rules of equal bodies merged into one (`root` always kept): each rule after the rules it refers
    to (post-order), its body read with their merged names, so one pass merges whole equal subtrees; in a cycle
    of references a rule is read by its own name (less merged, never wrong), and renamed once merged."""
    rules = dict(_rules(ebnf))
    pieces = {name: _pieces(body) for name, body in rules.items()}
    merged: dict[str, str] = {}
    first: dict[str, str] = {}
    for name in _post_order(pieces):
        parts = pieces[name]
        parts[1::2] = [merged.get(word, word) for word in parts[1::2]]
        key = "".join("\0" if i % 2 and part == name else part for i, part in enumerate(parts))  # self: \0
        merged[name] = name if name == "root" else first.setdefault(key, name)
        first.setdefault(key, name)
    kept = [name for name in rules if merged.get(name, name) == name]
    for name in kept:  # a rule read before a rule of its cycle merged still names that rule: it follows it
        pieces[name][1::2] = [merged.get(word, word) for word in pieces[name][1::2]]
    return "".join(f"{name} ::= {''.join(pieces[name])}\n" for name in kept)


def _post_order(pieces: dict[str, list[str]]) -> list[str]:
    """Rule names, each after the rules it refers to (but along a cycle), without recursion."""
    order: list[str] = []
    state: dict[str, bool] = {}  # False: being visited, True: done
    for start in pieces:
        stack = [(start, iter(pieces[start][1::2]))] if start not in state else []
        state.setdefault(start, False)
        while stack:
            name, refs = stack[-1]
            ref = next((r for r in refs if r in pieces and r not in state), None)
            if ref is None:
                stack.pop()
                state[name] = True
                order.append(name)
            else:
                state[ref] = False
                stack.append((ref, iter(pieces[ref][1::2])))
    return order


def _pieces(body: str) -> list[str]:
    """`body` cut as text, identifier, text, identifier, ..., text (a literal or class stays inside a text)."""
    pieces, start = [], 0
    for m in _IDENTIFIER.finditer(body):
        if m[1] is not None:
            pieces += [body[start : m.start()], m[1]]
            start = m.end()
    return [*pieces, body[start:]]


_IDENTIFIER = re.compile(rf"{_LITERAL_OR_CLASS}|({_NAME_TEXT})")
"""A literal or a class (skipped: never renamed), or an identifier (the captured group)."""
