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

from gateway.grammars.json import rewritten_bottom_up

_SAY_ITEMS = frozenset({"items", "prefixItems", "unevaluatedItems"})


def counted_items(schema: Any) -> Any:
    """`schema` with every counted array that says no items given `items: {}`; the very same object where there is
    none (its grammar byte for byte as before)."""
    return rewritten_bottom_up(schema, "", lambda node, _: _with_items(node))


def _with_items(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    says_array = kind == "array" or (isinstance(kind, list) and "array" in kind)
    if says_array and ("minItems" in schema or "maxItems" in schema) and not _SAY_ITEMS & schema.keys():
        return {**schema, "items": {}}
    return schema
