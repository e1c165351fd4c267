"""A `required` name that `properties` does not list, declared there before xgrammar sees the schema.

xgrammar 0.2.9 writes an object's `properties` and, where `additionalProperties` is a schema, optional free names;
a required name neither lists is never required: `{"type": "object", "properties": {"a": {"type": "string"}},
"required": ["a", "b"]}` took `{"a": "x"}` (JSON Schema requires `b`) and refused `{"a": "x", "b": 1}`, and
`{"type": "object", "required": ["b"]}` took only `{}`. Such a name is added to `properties` with the schema JSON
Schema gives it there, `additionalProperties`' (absent or `true`: any value; `unevaluatedProperties`' where that is
the only one and no applicator is beside it). Where that is `false`, no object matches the schema; where
`patternProperties` is beside (its patterns may match the name, and which schemas apply is not worked out), or
`unevaluatedProperties` beside an applicator, it is not declared: under the client's strict a 400 naming the
`required`, best effort the schema as it was and the name listed as not enforced (unenforced.py). Runs on the
folded schema (all_of.py: a union's branch has the `required` beside it by then), at every schema position.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.grammars.all_of import SiblingGap
from gateway.grammars.json import SchemaGrammarError, rewritten_bottom_up

_OBJECT_KEYWORDS = ("properties", "additionalProperties", "patternProperties")
"""Keywords that make xgrammar read a schema with no `type` as an object (without one, `required` alone: any value)."""
_APPLICATORS = ("anyOf", "oneOf", "allOf", "$ref", "$dynamicRef", "if", "dependentSchemas")


def declared_required(schema: Any, param: str, exact: bool = False, gaps: list[SiblingGap] | None = None) -> Any:
    """`schema` (folded) with each object's required names that its `properties` does not list declared there; the
    very same object where there is none (its grammar byte for byte as before). Where a name cannot be declared, a
    SchemaGrammarError naming its `required` under `param` when `exact`, else the object left as it was and the
    name added to `gaps`."""
    return rewritten_bottom_up(schema, param, lambda node, where: _declared(node, where, exact, gaps))


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


def _declared(out: dict[str, Any], where: str, exact: bool, gaps: list[SiblingGap] | None) -> dict[str, Any]:
    """One object schema (its subschemas done) with its undeclared required names declared."""
    names = undeclared(out)
    if not names or "$ref" in out or "$dynamicRef" in out:  # a reference's target may list them: xgrammar's own
        return out
    rest, why = _schema_of_others(out, names)
    if why is not None:
        if exact:
            raise SchemaGrammarError(f"the JSON schema cannot be enforced: {why}", f"{where}.required")
        if gaps is not None and not any(g.where == where and g.keyword == "required" for g in gaps):
            gaps.append(SiblingGap(where, "required", why))
        return out
    if not isinstance(rest, dict):  # no schema (the doors refuse one): left to xgrammar
        return out
    return {**out, "properties": {**out.get("properties", {}), **dict.fromkeys(names, rest)}}


def _schema_of_others(node: dict[str, Any], names: list[str]) -> tuple[Any, str | None]:
    """The schema a name `properties` does not list meets in `node`, or why there is none to declare."""
    listed = ", ".join(json.dumps(n, ensure_ascii=False) for n in names)
    said = f"'required' names {listed}, which 'properties' does not list"
    if isinstance(node.get("patternProperties"), dict) and node["patternProperties"]:
        return None, f"{said}, beside 'patternProperties' (not declared: list it in 'properties')"
    if "additionalProperties" in node:
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
