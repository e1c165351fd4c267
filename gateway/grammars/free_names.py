"""EBNF for a free parameter name (an XML style's `additionalProperties`) that is none of the declared names.

xgrammar's XML styles write a free name as `xml_variable_name` (`[a-zA-Z_] [a-zA-Z0-9_]*`), so an additional
parameter could take a declared parameter's name: `n` written twice, or an optional `n` skipped and then written
free with a value its own schema refuses. The rules here are that name class less the declared names, as a trie
of them: a name walks down the trie while it spells a declared name's prefix, may end at any node that is no
declared name, and leaves the trie with any other character into a tail of plain name characters. A declared
name's strict prefix and its extensions stay writable; nodes whose names to come are alike share one rule. Where the
style bounds names (`most`), the tail is counted in blocks of 8 (xgrammar's compile cost grows with a count).
Each trie node costs xgrammar a few token masks: on Qwen3's vocabulary a tool with `additionalProperties` and 3
declared parameters compiles in ~230 ms of CPU (qwen_xml) instead of ~140, with 30 in ~0.7 s instead of ~0.14, with
300 in ~1.6 s instead of ~0.24 (glm_xml ~0.1, 0.3, 0.7 s: bench/xml_free_names_bench.py); a schema without free
names is untouched, and the compile budget bounds a hostile one.

Each arguments object has its own names (`distinct_free_names`): the root, each `anyOf` / `oneOf` branch (a name
declared only in another branch is free here) and the object a local `$ref` names; its `patternProperties` keys
lose its declared names too (`key_patterns`). Two free parameters can still share a name (`extra` twice: a grammar
cannot remember the names written): the parsers stream both keys, which a JSON reader takes as the last value at
the first key's place, as vLLM's parsers build a dict (last wins). A free name is none a pattern key of its object
matches (`unmatched_names`: JSON Schema types that name by the pattern's schema, not `additionalProperties`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from gateway.grammars.json import SchemaGrammarError
from gateway.grammars.key_patterns import Chars, key_pattern_rules, shared_bound, unwritten
from gateway.grammars.unmatched_names import unmatched_name_rules

FREE_NAME_RULE = "xml_variable_name ::= (([a-zA-Z_] [a-zA-Z0-9_]*))"
"""xgrammar's free-name rule, as it prints it: the names rewritten here are those it writes."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_REST = _FIRST | frozenset("0123456789")
_BLOCK = 8


def free_name_rules(declared: Iterable[str], most: int | None, rule: str) -> str:
    """EBNF rules, `rule` the one to reference, for a name of `xml_variable_name`'s class of at most `most`
    characters (any number when None) that is none of `declared`."""
    names = {n for n in declared if _NAME.fullmatch(n) and (most is None or len(n) <= most)}
    trie: dict[str, set[str]] = {"": set()}  # each declared name's prefix: the characters that follow it
    for name in names:
        for depth in range(len(name)):
            trie.setdefault(name[:depth], set()).add(name[depth])
            trie.setdefault(name[: depth + 1], set())
    ids = {prefix: f"{rule}_{i}" if prefix else rule for i, prefix in enumerate(sorted(trie))}
    tails: dict[int | None, str] = {}
    lines: list[str] = []
    bodies: dict[str, str] = {}
    for prefix in sorted(trie, key=lambda p: (-len(p), p)):  # a node's children first; the same order every run
        nexts = trie[prefix]
        alternatives = [f'("{c}" {ids[prefix + c]})' for c in sorted(nexts) if prefix + c in ids]
        left = None if most is None else shared_bound(most - len(prefix) - 1)
        escapes = (_REST if prefix else _FIRST) - nexts
        if escapes and (left is None or left >= 0):
            tail = "" if left == 0 else " " + tails.setdefault(left, f"{rule}_tail_{'any' if left is None else left}")
            alternatives.append(f"({_char_class(escapes)}{tail})")
        if prefix and prefix not in names:
            alternatives.append('("")')
        body = " | ".join(alternatives)
        if not body:  # a declared name as long as names may be: nothing more to write
            del ids[prefix]
        elif prefix and body in bodies:  # the same names as another node's follow: that node's rule
            ids[prefix] = bodies[body]
        else:
            bodies[body] = ids[prefix]
            lines.append(f"{ids[prefix]} ::= ({body})")
    lines.reverse()  # the start rule first
    return "\n".join(lines + _tail_rules(tails, rule))


def _tail_rules(tails: dict[int | None, str], rule: str) -> list[str]:
    """The rules `tails` names: any number of name characters (None), or 0 .. N of them as up to 7, or a block of 8
    and 0 .. N - 8 more (a chain the tails share)."""
    chars, block = _char_class(_REST), f"{rule}_block"
    lines = [f"{name} ::= (({chars}*))" for left, name in tails.items() if left is None]
    bounded = [left for left in tails if left is not None]
    needed = sorted({left - _BLOCK * k for left in bounded for k in range(left // _BLOCK + 1)})
    for left in needed:
        more = f" | ({block} {rule}_tail_{left - _BLOCK})" if left >= _BLOCK else ""
        lines.append(f"{rule}_tail_{left} ::= (({chars}{{0, {min(left, _BLOCK - 1)}}}){more})")
    if needed and needed[-1] >= _BLOCK:
        lines.append(f"{block} ::= (({chars}{{{_BLOCK}}}))")
    return lines


def _char_class(chars: frozenset[str]) -> str:
    """`chars` (name characters: nothing to escape) as an EBNF class of ranges."""
    codes = sorted(map(ord, chars))
    runs: list[list[int]] = []
    for code in codes:
        if runs and runs[-1][1] == code - 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    return "[" + "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in runs) + "]"


_RULE_NAME = re.compile(r"^(\S+) ::= ")
_OWN_SUFFIX = re.compile(r"(?:_additional_properties(?:_\d+)?|_\d+)?")
"""What follows an object's rule name in the rules xgrammar writes a free name in."""
_KEY_LINE = re.compile(r"^(\S+)_(pp|prop)_(\d+)_key ::= .*$")
_VARIABLE_NAME = re.compile(r"\bxml_variable_name\b")
_BUILTIN_OBJECT = re.compile(r"^xml_(?:object|object_properties|variable_name) ::= ")
_REF = re.compile(r"#/(\$defs|definitions)/(\w+)")
_REF_RULE = {"$defs": "defs", "definitions": "definitions"}
"""Where a `$ref` may point (`#/$defs/NAME`), and the head of the rule name xgrammar gives the object there."""


def distinct_free_names(
    ebnf: str, schema: Any, most: int | None, unreadable: Chars = (), strict_param: str | None = None
) -> str:
    """xgrammar's XML-style arguments `ebnf` for `schema` with each object's free names (`additionalProperties`)
    and pattern keys (`patternProperties`, `key_patterns`) none of that object's declared names: the arguments
    object, its `anyOf` / `oneOf` branches and the `$defs` / `definitions` they refer to, each known by the rules
    xgrammar names after it (`root`, `root_case_0`, `defs_A`). A rule of another name (xgrammar's naming changed)
    takes the names every object declares. Two free parameters may still share a name (a grammar cannot count
    them): the parser keeps both, a JSON reader the last, as vLLM's dict does. Pattern keys are at most `most`
    characters and none of `unreadable` (`key_patterns`), free names none a pattern key matches
    (`unmatched_names`); where either cannot be written and `strict_param` names the schema, a
    SchemaGrammarError names the keyword (else the gap stays, best effort)."""
    objects = object_names(schema)
    everything = sorted({name for names, _ in objects.values() for name in names})
    all_patterns = sorted({pattern for _, patterns in objects.values() for pattern in patterns})
    if not everything and not all_patterns:
        return ebnf
    rules: dict[tuple[tuple[str, ...], tuple[str, ...]], str] = {}
    lines: list[str] = []
    for line in ebnf.split("\n"):
        key = _KEY_LINE.match(line)
        owner = objects.get(key[1]) if key else None
        if key and owner and int(key[3]) < len(owner[1]):
            rule = f"xml_key_{len(lines)}"
            pattern = owner[1][int(key[3])]
            written = key_pattern_rules(pattern, owner[0], rule, most, unreadable)
            if written is not None:
                lines += [f"{key[1]}_{key[2]}_{key[3]}_key ::= (({rule}))", written]
                continue
            if strict_param is not None and unwritten(pattern, most, unreadable):
                raise SchemaGrammarError(
                    f"the parameter names the pattern {json.dumps(pattern)} matches cannot all be written in this "
                    f"model's call format (at most {most} characters, none of {_shown(unreadable)}); bound it, or "
                    "set strict false for best effort",
                    f"{strict_param}.patternProperties",
                )
        name = _RULE_NAME.match(line)
        if name is None or _BUILTIN_OBJECT.match(line) or not _VARIABLE_NAME.search(line):
            lines.append(line)
            continue
        owners = [o for o in objects if name[1].startswith(o) and _OWN_SUFFIX.fullmatch(name[1], len(o))]
        declared = tuple(sorted(set().union(*(objects[o][0] for o in owners)))) if owners else tuple(everything)
        patterns = tuple(sorted({p for o in owners for p in objects[o][1]})) if owners else tuple(all_patterns)
        if declared or patterns:
            rule = rules.setdefault((declared, patterns), "xml_free_name" + (f"_set{len(rules)}" if rules else ""))
            line = _VARIABLE_NAME.sub(rule, line)
        lines.append(line)
    written = [
        _free_rules(declared, patterns, most, rule, strict_param) for (declared, patterns), rule in rules.items()
    ]
    return "\n".join([*lines, *written]).rstrip("\n") + "\n"


def _free_rules(
    declared: tuple[str, ...], patterns: tuple[str, ...], most: int | None, rule: str, strict_param: str | None
) -> str:
    """The free names of an object: none of `declared`, none a pattern of `patterns` matches (`unmatched_names`)
    where that can be written; where not, a SchemaGrammarError when `strict_param`, else the names less the
    declared ones."""
    if patterns:
        unclaimed = unclaimed_name_rules(patterns, declared, most, rule)
        if unclaimed is not None:
            return unclaimed
        if strict_param is not None:
            raise SchemaGrammarError(
                "the free parameter names ('additionalProperties') cannot be kept from the names a "
                "'patternProperties' pattern matches in this model's call format (a pattern's syntax or size); "
                "set 'additionalProperties' false, or strict false for best effort",
                f"{strict_param}.additionalProperties",
            )
    return free_name_rules(declared, most, rule)


def unclaimed_name_rules(patterns: Iterable[str], declared: Iterable[str], most: int | None, rule: str) -> str | None:
    """EBNF rules, `rule` the one to reference, for a free name (`[a-zA-Z_] [a-zA-Z0-9_]*`, at most `most`
    characters: any number when None) that is none of `declared` and that no pattern of `patterns` matches
    (`unmatched_names`); None where that cannot be written (a pattern's syntax or size)."""
    unmatched = unmatched_name_rules(patterns, declared, most, rule)
    return None if unmatched is None else "\n".join([unmatched[0], *_tail_rules(unmatched[1], rule)])


def _shown(unreadable: Chars) -> str:
    return json.dumps("".join(chr(low) for low, _ in unreadable)) if unreadable else "nothing"


def object_names(schema: Any) -> dict[str, tuple[set[str], list[str]]]:
    """The rule name xgrammar gives each XML arguments object of `schema` (see `distinct_free_names`): its
    declared names and its `patternProperties` keys. An object behind a `$ref` other than `#/$defs/NAME` or
    `#/definitions/NAME`, or with `$ref` beside other keywords, is left out."""
    found: dict[str, tuple[set[str], list[str]]] = {}
    root = schema if isinstance(schema, dict) else {}

    seen: set[str] = set()

    def walk(node: Any, rule: str) -> None:
        if not isinstance(node, dict) or rule in seen:
            return
        seen.add(rule)
        ref = node.get("$ref")
        if ref is not None:
            target = _REF.fullmatch(ref) if isinstance(ref, str) else None
            defs = root.get(target[1]) if target else None
            if target and isinstance(defs, dict) and not (node.keys() - {"$ref", *_REF_RULE}):
                walk(defs.get(target[2]), f"{_REF_RULE[target[1]]}_{target[2]}")
            return
        properties, patterns = node.get("properties"), node.get("patternProperties")
        found[rule] = (
            set(properties) if isinstance(properties, dict) else set(),
            list(patterns) if isinstance(patterns, dict) else [],
        )
        for key in ("anyOf", "oneOf"):
            for i, branch in enumerate(node.get(key) if isinstance(node.get(key), list) else ()):
                walk(branch, f"{rule}_case_{i}")

    walk(schema, "root")
    return found
