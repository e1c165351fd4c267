"""An array counted (`minItems` / `maxItems`) with no `items` given `items: {}` before xgrammar sees the schema.

xgrammar 0.2.9 reads `{"type": "array"}` as any array, but beside a count it reads a missing `items` as no items:
`{"type": "array", "maxItems": 1}` became `root ::= "[" "]"` (refusing `["s"]`, which JSON Schema admits) and
`{"type": "array", "minItems": 1}` a refusal ("additional items are not allowed"). JSON Schema's missing `items`
is any item: written so, the count is enforced over any items. An array with `prefixItems` or `unevaluatedItems`
(which say what follows) is left as it is, and a schema with no array `type` too (xgrammar reads a count alone as
any value: unenforced.py names it under strict).
"""

from __future__ import annotations

from typing import Any

from gateway.grammars.json import SUBSCHEMA_KEYS, SUBSCHEMA_MAPS

_SAY_ITEMS = frozenset({"items", "prefixItems", "unevaluatedItems"})


def counted_items(schema: Any) -> Any:
    """`schema` with every counted array that says no items given `items: {}`; the very same object where there is
    none (its grammar byte for byte as before)."""
    if isinstance(schema, list):
        items = [counted_items(s) for s in schema]
        return schema if all(a is b for a, b in zip(items, schema, strict=True)) else items
    if not isinstance(schema, dict):
        return schema
    out = schema
    for key, value in schema.items():
        if key in SUBSCHEMA_KEYS and isinstance(value, (dict, list)):
            new = counted_items(value)
        elif key in SUBSCHEMA_MAPS and isinstance(value, dict):
            mapped = {k: counted_items(v) for k, v in value.items()}
            new = value if all(mapped[k] is value[k] for k in value) else mapped
        else:
            continue
        if new is not value:
            out = {**out, key: new}
    if _says_array(out) and ("minItems" in out or "maxItems" in out) and not _SAY_ITEMS & out.keys():
        return {**out, "items": {}}
    return out


def _says_array(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "array" or (isinstance(kind, list) and "array" in kind)
