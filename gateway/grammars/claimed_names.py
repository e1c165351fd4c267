"""A declared name that a `patternProperties` pattern also matches: its property schema asserts the pattern's too.

JSON Schema checks such a name's value against its `properties` schema AND the schema of every pattern matching it;
xgrammar 0.2.9 writes it by its `properties` schema alone, and once more as the pattern's key by the pattern's:
`{"properties": {"b": {"type": "string"}}, "patternProperties": {"^b": {"type": "integer"}}}` took `{"b": "x"}`
and `{"b": 1}` (no value is valid). Here each declared name's schema is folded (conjoined.py, exact) with those of
the patterns that match it (key_patterns.searched, as JSON Schema reads a pattern), and in JSON the pattern keys are
kept from the declared names (json_free_names.py). Where a pattern cannot be matched against the name exactly, the
fold is not exact, or no value fits the name (xgrammar refuses a `false` schema and writes an empty `anyOf` as an
empty value; a required one: no object matches), the patterns' claims are not enforced: under the client's
strict a 400 naming the object's `patternProperties`, best effort the object as it was and the keyword listed
(unenforced.py). Runs on the folded schema, before required.py declares the required names `properties` does not
list (those get the patterns' schemas there).
"""

from __future__ import annotations

import json
from typing import Any

from gateway.grammars.all_of import SiblingGap
from gateway.grammars.conjoined import conjoined
from gateway.grammars.json import SchemaGrammarError, rewritten_bottom_up
from gateway.grammars.key_patterns import searched


def claimed_names(schema: Any, param: str, exact: bool = False, gaps: list[SiblingGap] | None = None) -> Any:
    """`schema` with each declared property's schema conjoined with those of the patterns matching its name (the
    very same objects where no pattern matches a declared name). Where that cannot be done exactly, or no value
    fits a name: a SchemaGrammarError naming the object's `patternProperties` under `param` when `exact`, else the
    object as it was and the keyword added to `gaps`."""

    def visit(node: dict[str, Any], where: str) -> Any:
        properties, patterns = node.get("properties"), node.get("patternProperties")
        if not (isinstance(properties, dict) and isinstance(patterns, dict) and patterns) or "$ref" in node:
            return node
        required = node.get("required") if isinstance(node.get("required"), list) else []
        folded, why = _folded(properties, patterns, required, where)
        if why is not None:
            if exact:
                raise SchemaGrammarError(f"the JSON schema cannot be enforced: {why}", f"{where}.patternProperties")
            if gaps is not None:
                gaps.append(SiblingGap(where, "patternProperties", why))
            return node
        return node if folded is properties else {**node, "properties": folded}

    return rewritten_bottom_up(schema, param, visit)


def _folded(
    properties: dict[str, Any], patterns: dict[str, Any], required: Any, where: str
) -> tuple[dict[str, Any], str | None]:
    """`properties` with the matching patterns' schemas folded in (the very same dict where none matches), or why
    they cannot be."""
    out = properties
    for name, own in properties.items():
        matched = []
        for pattern, schema in patterns.items():
            found = searched(pattern, name)
            if found is None:
                return properties, (
                    f"'patternProperties' {_shown(pattern)} cannot be matched exactly against the declared name "
                    f"{_shown(name)} (JSON Schema asserts both schemas of a name both match); list its schema in "
                    "'properties', or use a pattern that cannot match it"
                )
            if found:
                matched.append({} if schema is True else schema)
        if not matched:
            continue
        said = f"the declared name {_shown(name)}, which 'patternProperties' also matches"
        try:
            schema = conjoined([{} if own is True else own, *matched], f"{where}.properties.{name}")
        except SchemaGrammarError as exc:
            reason = str(exc).removeprefix("the JSON schema cannot be enforced: ")
            return properties, f"{said}: its schemas do not fold into one ({reason})"
        if schema is False:
            drop = "no object matches" if name in required else "remove it from 'properties'"
            return properties, f"{said}: no value fits both its schema and the pattern's ({drop})"
        if schema != own:
            out = {**out, name: schema}
    return out, None


def _shown(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)
