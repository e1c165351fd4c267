"""A `required` name that `properties` does not list, declared there before xgrammar sees the schema.

xgrammar 0.2.9 writes an object's `properties` and, where `additionalProperties` is a schema, optional free names;
a required name neither lists is never required: `{"type": "object", "properties": {"a": {"type": "string"}},
"required": ["a", "b"]}` took `{"a": "x"}` (JSON Schema requires `b`) and refused `{"a": "x", "b": 1}`, and
`{"type": "object", "required": ["b"]}` took only `{}`. Such a name is added to `properties` with the schema JSON
Schema gives it there: the `patternProperties` schema of each pattern it matches (searched, as JSON Schema reads a
pattern: key_patterns.searched; several folded into one, conjoined.py), else `additionalProperties`' (absent or
`true`: any value; `unevaluatedProperties`' where that is the only one and no applicator is beside it). Where that
is `false` (or the patterns' schemas admit nothing together), no object matches the schema; where a pattern cannot
be matched against the name exactly, the matching schemas do not fold exactly, or `unevaluatedProperties` is beside
an applicator, it is not declared: under the client's strict a 400 naming the `required`, best effort the schema as
it was and the name listed as not enforced (unenforced.py).
A `required` beside a local `$ref` (xgrammar reads the reference alone, and never required the name) is folded with
the reference's target into one schema (conjoined.py: JSON Schema 2019+ asserts both), its names then declared so;
where that fold is not exact, admits nothing, or the target is being inlined already (a recursive schema), the same
gap. Runs on the folded schema (all_of.py: a union's branch has the `required` beside it by then), at every schema
position.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.grammars.all_of import SiblingGap
from gateway.grammars.conjoined import conjoined, reference_target
from gateway.grammars.json import SchemaGrammarError, rewritten_bottom_up
from gateway.grammars.key_patterns import searched

_OBJECT_KEYWORDS = ("properties", "additionalProperties", "patternProperties")
"""Keywords that make xgrammar read a schema with no `type` as an object (without one, `required` alone: any value)."""
_APPLICATORS = ("anyOf", "oneOf", "allOf", "$ref", "$dynamicRef", "if", "dependentSchemas")
_SAYS_TYPE = frozenset({"type", "enum", "const", "anyOf", "oneOf", "$ref", *_OBJECT_KEYWORDS})
"""Keywords by which xgrammar writes a schema as other than any value (a `$ref`: its target's)."""
_MAX_INLINED = 256
"""`$ref` targets folded with a `required` beside them, per schema (each may double it)."""
_ROOT_ONLY = ("$defs", "definitions")


def declared_required(
    schema: Any, param: str, exact: bool = False, gaps: list[SiblingGap] | None = None, root: Any = None
) -> Any:
    """`schema` (folded) with each object's required names that its `properties` does not list declared there, and
    each `required` beside a `$ref` folded with its target (in `root`, else `schema`); the very same object where
    there is none (its grammar byte for byte as before). Where a name cannot be declared, a SchemaGrammarError
    naming its `required` under `param` when `exact`, else the object left as it was and the name added to
    `gaps`."""
    return _Declarer(schema if root is None else root, exact, gaps).declared(schema, param)


def undeclared(node: Any) -> list[str]:
    """The names an object schema requires that its `properties` does not list (none where it is no object)."""
    if not isinstance(node, dict) or not isinstance(node.get("required"), list):
        return []
    properties = node.get("properties", {})
    kind = node.get("type")
    if not isinstance(properties, dict) or (kind is None and not node.keys() & set(_OBJECT_KEYWORDS)):
        return []
    if not (kind is None or kind == "object" or (isinstance(kind, list) and "object" in kind)):
        return []  # `required` asserts nothing of a value that is no object
    return [name for name in dict.fromkeys(node["required"]) if isinstance(name, str) and name not in properties]


class _Declarer:
    """One schema's declarations: its root, the `$ref`s whose targets are being folded, how many were, and what to
    do where a name cannot be declared."""

    def __init__(self, root: Any, exact: bool, gaps: list[SiblingGap] | None) -> None:
        self.root, self.exact, self.gaps = root, exact, gaps
        self.inlining: list[str] = []
        self.inlined = 0

    def declared(self, schema: Any, where: str) -> Any:
        return rewritten_bottom_up(schema, where, self._visit)

    def _visit(self, node: dict[str, Any], where: str) -> Any:
        required = node.get("required")
        if isinstance(node.get("$ref"), str) and isinstance(required, list):
            return self._referenced(node, [n for n in dict.fromkeys(required) if isinstance(n, str)], where)
        return self._declared(node, where)

    def _referenced(self, node: dict[str, Any], names: list[str], where: str) -> Any:
        """A `$ref` with a `required` beside: the two folded into one schema (its names then declared), the node
        as it was where its target already requires them all or is not found (a remote or dangling reference)."""
        ref, target = node["$ref"], reference_target(self.root, node["$ref"])
        if target is None or (isinstance(target, dict) and set(names) <= set(target.get("required") or ())):
            return node
        said = f"'required' names {_listed(names)} beside a '$ref' (xgrammar reads the reference alone)"
        if ref in self.inlining:
            return self._gap(node, where, f"{said}, within its own target {ref} (list them in that schema)")
        if self.inlined >= _MAX_INLINED:
            return self._gap(node, where, f"{said}, past {_MAX_INLINED} targets folded (list them in that schema)")
        beside = {k: v for k, v in node.items() if k != "$ref" and k not in _ROOT_ONLY}
        try:
            merged = conjoined([target, beside], where)
        except SchemaGrammarError as exc:
            reason = str(exc).removeprefix("the JSON schema cannot be enforced: ")
            return self._gap(node, where, f"{said}, not folded with its target exactly ({reason})")
        if not isinstance(merged, dict):
            return self._gap(node, where, f"{said}: no value matches both it and its target {ref}")
        if "required" in merged and not merged.keys() & _SAYS_TYPE:
            return self._gap(node, where, f"{said}, whose target says no type (without one any value passes)")
        self.inlined += 1
        self.inlining.append(ref)
        try:
            return self.declared({**{k: node[k] for k in _ROOT_ONLY if k in node}, **merged}, where)
        finally:
            self.inlining.pop()

    def _declared(self, out: dict[str, Any], where: str) -> dict[str, Any]:
        """One object schema (its subschemas done) with its undeclared required names declared."""
        names = undeclared(out)
        if not names or "$ref" in out or "$dynamicRef" in out:  # a reference's target may list them: xgrammar's own
            return out
        declared = {}
        for name in names:
            schema, why = _schema_of(out, name, where)
            if why is not None:
                return self._gap(out, where, why)
            if not isinstance(schema, dict):  # no schema (the doors refuse one): left to xgrammar
                return out
            declared[name] = schema
        return {**out, "properties": {**out.get("properties", {}), **declared}}

    def _gap(self, node: dict[str, Any], where: str, why: str) -> dict[str, Any]:
        """`node` as it was, its `required` not enforced: a SchemaGrammarError naming it when exact, else a gap."""
        if self.exact:
            raise SchemaGrammarError(f"the JSON schema cannot be enforced: {why}", f"{where}.required")
        if self.gaps is not None and not any(g.where == where and g.keyword == "required" for g in self.gaps):
            self.gaps.append(SiblingGap(where, "required", why))
        return node


def _schema_of(node: dict[str, Any], name: str, where: str) -> tuple[Any, str | None]:
    """The schema a name `properties` does not list meets in `node`, or why there is none to declare."""
    said = f"'required' name {_listed([name])}, which 'properties' does not list"
    patterns = node.get("patternProperties")
    matched = []
    for pattern, schema in patterns.items() if isinstance(patterns, dict) else ():
        found = searched(pattern, name)
        if found is None:
            why = "which cannot be matched against it exactly (list it in 'properties')"
            return None, f"{said}, beside 'patternProperties' {_listed([pattern])}, {why}"
        if found:
            matched.append(schema)
    if matched:
        try:
            rest = matched[0] if len(matched) == 1 else conjoined(matched, where)
        except SchemaGrammarError as exc:
            reason = str(exc).removeprefix("the JSON schema cannot be enforced: ")
            return None, f"{said}, whose 'patternProperties' schemas do not fold into one ({reason})"
        if rest is False:
            return None, f"{said} and the 'patternProperties' it matches refuse it: no object matches"
    elif "additionalProperties" in node:
        rest = node["additionalProperties"]
    elif "unevaluatedProperties" in node and node["unevaluatedProperties"] is not True:
        if node.keys() & set(_APPLICATORS):
            return None, f"{said}, beside 'unevaluatedProperties' and an applicator (list it in 'properties')"
        rest = node["unevaluatedProperties"]
    else:
        rest = True
    if rest is False:
        keyword = "additionalProperties" if "additionalProperties" in node else "unevaluatedProperties"
        return None, f"{said} and '{keyword}' false refuses: no object matches"
    return ({} if rest is True else rest), None


def _listed(names: list[str]) -> str:
    return ", ".join(json.dumps(n, ensure_ascii=False) for n in names)
