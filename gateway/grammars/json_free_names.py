"""A JSON object's free names (`additionalProperties`) and pattern keys (`patternProperties`) beside its declared
names (`properties`): none of them a declared name, no free name a pattern key.

JSON Schema types a name by `additionalProperties` only where neither `properties` nor a `patternProperties`
pattern claims it. xgrammar 0.2.9 writes an object with both `properties` and `patternProperties` and a rest schema
(`additionalProperties`, else `unevaluatedProperties`, not `false`) with its extra names as any string, the rest's
value beside: `{"properties": {"a": …}, "patternProperties": {"^b": {"type": "integer"}}, "additionalProperties":
{"enum": [1, "s"]}}` took `{"b": "s"}` (`b` must be an integer) and `{"a": 1}` (`a`'s own schema unchecked); with
no pattern, as a trie of the declared names that takes any escape (`{"\\u0061": 1}` is `{"a": 1}`). (Without
`properties` it writes the pattern keys alone and no other name, and with the rest `false` or absent no other name:
narrowings, every object written valid.) Here such an object's rest becomes one more pattern key, marked, the rest
`false`; xgrammar writes it as its other pattern keys, and the marked key's rule is then the free names of
`free_names.unclaimed_name_rules` (`free_name_rules` beside no pattern): `[a-zA-Z_] [a-zA-Z0-9_]*` (a narrowing: a
free name of other characters is not written; ~5x cheaper to compile than xgrammar's trie, bench/RESULTS.md), none
declared, none a pattern matches (all the patterns as one automaton, bounded). Where a pattern cannot be followed
so (its syntax, or past the automaton's bound) the rest is not enforced: under the client's strict a 400 naming
it, best effort xgrammar's grammar and the keyword listed (unenforced.py).
A pattern key xgrammar would write as a declared name (its full match: `^b` writes `b`) is marked too, its rule
`key_patterns.key_pattern_rules` less the declared names (claimed_names.py folds the pattern's schema into theirs),
where that cannot be written a `patternProperties` gap the same way.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gateway.grammars.all_of import SiblingGap
from gateway.grammars.free_names import free_name_rules, unclaimed_name_rules
from gateway.grammars.json import SchemaGrammarError, rewritten_bottom_up
from gateway.grammars.key_patterns import key_pattern_rules, parsed_pattern, searched

_MARK = "free-name-mark-{}"
"""A marked pattern key (its number after it): a literal xgrammar prints as it is."""
_RULE = "json_free_name_{}"
_KEY_RULE = "json_pattern_key_{}"
_UNQUOTED = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]
"""What xgrammar's pattern key writes only escaped, which it never does (a JSON string's `"`, `\\`, controls)."""
_RESTS = ("additionalProperties", "unevaluatedProperties")


def marked_free_names(
    schema: Any, param: str, exact: bool, gaps: list[SiblingGap] | None = None
) -> tuple[Any, dict[str, tuple[str, str]]]:
    """`schema` with each object's rest beside `properties` one more pattern key, marked, and each pattern key that
    could write a declared name marked (the very same `schema` where there is none), and each mark's names as EBNF:
    the rule to reference and the rules (`written_free_names` puts them in). Where a rest or pattern key cannot be
    so written: a SchemaGrammarError naming it under `param` when `exact`, else the object left so and the keyword
    added to `gaps`."""
    marks: dict[tuple[Any, ...], tuple[str, str, str]] = {}
    salt: list[int] = []

    def marked(key: tuple[Any, ...], rule: str, rules: str) -> str:
        if not salt:
            salt.append(_unused_salt(schema))
        if key not in marks:
            marks[key] = (_MARK.format(f"{salt[0]}-{len(marks)}"), rule, rules)
        return marks[key][0]

    def refused(keyword: str, where: str, why: str) -> None:
        if exact:
            raise SchemaGrammarError(f"the JSON schema cannot be enforced: {why}", f"{where}.{keyword}")
        if gaps is not None and not any(g.where == where and g.keyword == keyword for g in gaps):
            gaps.append(SiblingGap(where, keyword, why))

    def visit(node: dict[str, Any], where: str) -> Any:
        properties, patterns = node.get("properties"), node.get("patternProperties")
        if not (isinstance(properties, dict) and properties):
            return node
        patterns = patterns if isinstance(patterns, dict) else {}
        keys, why = _pattern_keys(patterns, properties, len(marks))
        if why is not None:
            refused("patternProperties", where, why)
        rest = _rest(node)
        out = node
        if keys:
            renamed = {(marked(*keys[k]) if k in keys else k): v for k, v in patterns.items()}
            out = {**node, "patternProperties": renamed}
        if rest is None:
            return out
        names = (tuple(patterns), tuple(properties))
        if names not in marks:
            rule = _RULE.format(len(marks))
            rules = unclaimed_name_rules(*names, None, rule) if patterns else free_name_rules(names[1], None, rule)
            if rules is None:
                why = (
                    f"'{rest}' beside 'patternProperties' and 'properties': its names cannot be kept from the names "
                    "a pattern matches (the pattern's syntax or size); set it false, or list the names"
                )
                refused(rest, where, why)
                return out
            marked(names, rule, rules)
        kept = {k: v for k, v in out.items() if k not in _RESTS}
        value = {} if node[rest] is True else node[rest]
        return {
            **kept,
            "patternProperties": {**out.get("patternProperties", {}), marks[names][0]: value},
            "additionalProperties": False,
        }

    out = rewritten_bottom_up(schema, param, visit)
    return out, {mark: (rule, rules) for mark, rule, rules in marks.values()}


def written_free_names(ebnf: str, marks: dict[str, tuple[str, str]]) -> str:
    """xgrammar's JSON `ebnf` of a schema `marked_free_names` marked, each marked pattern key its free names."""
    if not marks:
        return ebnf
    used: list[str] = []

    def key(line: re.Match[str]) -> str:
        rule, rules = marks[line[2]]
        if rules not in used:
            used.append(rules)
        return f"{line[1]} ::= (({rule}))"

    found = re.compile(
        r'^(\S+) ::= Regex\("(' + "|".join(map(re.escape, marks)) + r')", json_string=true\)$', re.MULTILINE
    )
    return "\n".join([found.sub(key, ebnf).rstrip("\n"), *used]) + "\n"


def _pattern_keys(
    patterns: dict[str, Any], properties: dict[str, Any], count: int
) -> tuple[dict[str, tuple[tuple[Any, ...], str, str]], str | None]:
    """Each pattern key xgrammar would write as a declared name too (its full match) with a value the name's schema
    may refuse, with what marks it (`marked`'s arguments: the key, the rule, the rules of its names but the declared
    ones), numbered from `count`; or why a pattern cannot be kept from them."""
    keys: dict[str, tuple[tuple[Any, ...], str, str]] = {}
    declared = tuple(properties)
    for pattern, schema in patterns.items():
        found = {name: searched(pattern, name) for name in declared}
        if not any(f is not False for f in found.values()):
            continue  # no declared name holds a match: none is its full match either
        if all(f is False or (f and properties[n] == schema) for n, f in found.items()):
            continue  # each name it matches has its schema (folded: claimed_names.py): any value it writes fits
        rule = _KEY_RULE.format(count + len(keys))
        if key_pattern_rules(pattern, declared, rule) is None and parsed_pattern(pattern) is not None:
            continue  # its full matches are none of the declared names: xgrammar's key as it is
        rules = key_pattern_rules(pattern, declared, rule, None, _UNQUOTED)
        if rules is None:
            why = (
                f"'patternProperties' {json.dumps(pattern, ensure_ascii=False)} beside 'properties': its keys "
                "cannot be kept from the declared names it matches (the pattern's syntax or size)"
            )
            return {}, why
        keys[pattern] = (("key", pattern, declared), rule, rules)
    return keys, None


def _unused_salt(schema: Any) -> int:
    """A number no mark in `schema` already spells (a client's own pattern key could)."""
    text = json.dumps(schema, ensure_ascii=False)
    return next(s for s in range(len(text) + 1) if _MARK.format(f"{s}-") not in text)


def _rest(node: dict[str, Any]) -> str | None:
    """The keyword giving the names of `node` neither its `properties` nor its `patternProperties` claim, where
    xgrammar writes them as any string, or any escaped (`properties` listing names, the rest no `false`)."""
    rest = next((k for k in _RESTS if k in node), None)
    return rest if rest is not None and isinstance(node[rest], (bool, dict)) and node[rest] is not False else None
