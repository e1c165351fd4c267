"""A JSON object's free names (`additionalProperties`) beside its pattern keys (`patternProperties`): none of them.

JSON Schema types a name by `additionalProperties` only where neither `properties` nor a `patternProperties`
pattern claims it. xgrammar 0.2.9 writes an object with both `properties` and `patternProperties` and a rest schema
(`additionalProperties`, else `unevaluatedProperties`, not `false`) with its extra names as any string, the rest's
value beside: `{"properties": {"a": …}, "patternProperties": {"^b": {"type": "integer"}}, "additionalProperties":
{"enum": [1, "s"]}}` took `{"b": "s"}` (`b` must be an integer) and `{"a": 1}` (`a`'s own schema unchecked).
(Without `properties` it writes the pattern keys alone and no other name, and with the rest `false` or absent no
other name: narrowings, every object written valid.) Here such an object's rest becomes one more pattern key,
marked, the rest `false`; xgrammar writes it as its other pattern keys, and the marked key's rule is then the free
names of `free_names.unclaimed_name_rules`: `[a-zA-Z_] [a-zA-Z0-9_]*` (a narrowing: a free name of other
characters is not written), none declared, none a pattern matches (all the patterns as one automaton, bounded).
Where a pattern cannot be followed so (its syntax, or past the automaton's bound) the rest is not enforced: under
the client's strict a 400 naming it, best effort xgrammar's grammar and the keyword listed (unenforced.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

from gateway.grammars.all_of import SiblingGap
from gateway.grammars.free_names import unclaimed_name_rules
from gateway.grammars.json import SchemaGrammarError, rewritten_bottom_up

_MARK = "free-name-mark-{}"
"""A marked pattern key (its number after it): a literal xgrammar prints as it is."""
_RULE = "json_free_name_{}"
_RESTS = ("additionalProperties", "unevaluatedProperties")


def marked_free_names(
    schema: Any, param: str, exact: bool, gaps: list[SiblingGap] | None = None
) -> tuple[Any, dict[str, tuple[str, str]]]:
    """`schema` with each object's rest beside `properties` and `patternProperties` one more pattern key, marked
    (the very same `schema` where there is none), and each mark's names as EBNF: the rule to reference and the
    rules (`written_free_names` puts them in). Where a rest cannot be so written: a SchemaGrammarError naming it
    under `param` when `exact`, else the object as it was and the rest added to `gaps`."""
    marks: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[str, str, str]] = {}
    salt: list[int] = []

    def visit(node: dict[str, Any], where: str) -> Any:
        rest = _rest(node)
        if rest is None:
            return node
        patterns, declared = tuple(node["patternProperties"]), tuple(node["properties"])
        if (patterns, declared) not in marks:
            rule = _RULE.format(len(marks))
            rules = unclaimed_name_rules(patterns, declared, None, rule)
            if rules is None:
                why = (
                    f"'{rest}' beside 'patternProperties' and 'properties': its names cannot be kept from the names "
                    "a pattern matches (the pattern's syntax or size); set it false, or list the names"
                )
                if exact:
                    raise SchemaGrammarError(f"the JSON schema cannot be enforced: {why}", f"{where}.{rest}")
                if gaps is not None:
                    gaps.append(SiblingGap(where, rest, why))
                return node
            if not salt:
                salt.append(_unused_salt(schema))
            marks[patterns, declared] = (_MARK.format(f"{salt[0]}-{len(marks)}"), rule, rules)
        mark = marks[patterns, declared][0]
        kept = {k: v for k, v in node.items() if k not in _RESTS}
        value = {} if node[rest] is True else node[rest]
        return {**kept, "patternProperties": {**node["patternProperties"], mark: value}, "additionalProperties": False}

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


def _unused_salt(schema: Any) -> int:
    """A number no mark in `schema` already spells (a client's own pattern key could)."""
    text = json.dumps(schema, ensure_ascii=False)
    return next(s for s in range(len(text) + 1) if _MARK.format(f"{s}-") not in text)


def _rest(node: dict[str, Any]) -> str | None:
    """The keyword giving the names of `node` neither its `properties` nor its `patternProperties` claim, where
    xgrammar writes them as any string (both listing names, the rest no `false`)."""
    properties, patterns = node.get("properties"), node.get("patternProperties")
    if not (isinstance(properties, dict) and properties and isinstance(patterns, dict) and patterns):
        return None
    rest = next((k for k in _RESTS if k in node), None)
    return rest if rest is not None and isinstance(node[rest], (bool, dict)) and node[rest] is not False else None
