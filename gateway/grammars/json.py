"""JSON grammars shared by the families: the schema a response_format asks for, and compact JSON.

xgrammar's `json_schema` format lets any amount of whitespace between tokens, and a small
model can spend its whole budget on it (`{\\n   \\n   …` until max_tokens). The grammars here
are xgrammar's own schema conversion with fixed separators (", " and ": ", one line), sent as
EBNF: every backend's xgrammar takes it, and a schema xgrammar cannot use fails here, as a
400, instead of on the backend.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from backends.xgrammar_compile import out_of_memory
from backends.xgrammar_core import xgrammar  # loaded at its first call: a gateway that builds no grammar never pays it

ANY_OBJECT: dict[str, Any] = {"type": "object"}
RESPONSE_SCHEMA_PARAM = "response_format.json_schema.schema"
SUBSCHEMA_KEYS = (
    "items",
    "prefixItems",
    "anyOf",
    "oneOf",
    "allOf",
    "additionalProperties",
    "additionalItems",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
)
"""Keywords whose value is a schema or a list of schemas."""
SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
OBJECT_SIGNS = frozenset({"properties", "additionalProperties", "unevaluatedProperties"})
ARRAY_SIGNS = frozenset({"items", "prefixItems", "unevaluatedItems"})
"""The keywords that make xgrammar 0.2.9 read a schema with no `type` as an object (first) or an array (measured:
`Grammar.from_json_schema`); `required`, `minProperties`, `patternProperties`, `minItems`, `minimum`… alone leave it
any value."""


def rewritten_bottom_up(node: Any, where: str, visit: Callable[[dict[str, Any], str], Any]) -> Any:
    """`node` with `visit(schema, where)` in place of each schema object at a schema position (SUBSCHEMA_KEYS,
    SUBSCHEMA_MAPS), its subschemas rewritten first; the very same objects where nothing changed (their grammar byte
    for byte as before)."""
    if isinstance(node, list):
        items = [rewritten_bottom_up(s, f"{where}[{i}]", visit) for i, s in enumerate(node)]
        return node if all(a is b for a, b in zip(items, node, strict=True)) else items
    if not isinstance(node, dict):
        return node
    out = node
    for key, value in node.items():
        if key in SUBSCHEMA_KEYS and isinstance(value, (dict, list)):
            new = rewritten_bottom_up(value, f"{where}.{key}", visit)
        elif key in SUBSCHEMA_MAPS and isinstance(value, dict):
            mapped = {k: rewritten_bottom_up(v, f"{where}.{key}.{k}", visit) for k, v in value.items()}
            new = value if all(mapped[k] is value[k] for k in value) else mapped
        else:
            continue
        if new is not value:
            out = {**out, key: new}
    return visit(out, where)


_XGRAMMAR_LOCATION = re.compile(r"^\[[\d:]+\] \S+:\d+: ")  # "[04:12:08] /project/cpp/x.cc:94: "


class SchemaGrammarError(ValueError):
    """A client schema that cannot become a grammar; `param` names where it came from."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def response_schema(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """The schema of a json_object / json_schema response_format; None for plain text."""
    kind = (response_format or {}).get("type")
    if kind == "json_object":
        return ANY_OBJECT
    if kind == "json_schema":
        return response_format.get("json_schema", {}).get("schema") or ANY_OBJECT
    return None


def response_strict(response_format: dict[str, Any] | None) -> bool:
    """Whether a json_schema response_format says `strict: true` (its schema must then be enforced whole)."""
    return (((response_format or {}).get("json_schema") or {}).get("strict")) is True


def compact_json_ebnf(schema: Any, param: str) -> str:
    """EBNF for one-line JSON matching `schema`; SchemaGrammarError (with `param`) if it has none."""
    # key order is kept: the grammar writes properties in the schema's declared order
    return _converted(lambda: _ebnf(json.dumps(schema, ensure_ascii=False)), param)


def xml_arguments_ebnf(schema: Any, style: str, param: str) -> str:
    """EBNF for arguments matching `schema` in one of xgrammar's XML argument styles (`glm_xml`, …), as its
    `json_schema` format with that style builds them; SchemaGrammarError (with `param`) if it has none."""
    return _converted(lambda: _xml_ebnf(json.dumps(schema, ensure_ascii=False), style), param)


def _converted(convert: Callable[[], str], param: str) -> str:
    """`convert()`, xgrammar's refusal of a schema raised as SchemaGrammarError with its reason and `param`."""
    try:
        return convert()
    except (RuntimeError, ValueError, TypeError) as exc:
        if out_of_memory(exc):  # no refusal of the schema: the compile child's memory bound was met
            raise MemoryError(str(exc)) from exc
        reason = _XGRAMMAR_LOCATION.sub(
            "", str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        )
        raise SchemaGrammarError(f"the JSON schema cannot be enforced: {reason}", param) from None


@lru_cache(maxsize=1024)
def _ebnf(schema_json: str) -> str:
    return str(xgrammar().Grammar.from_json_schema(schema_json, any_whitespace=False))


@lru_cache(maxsize=1024)
def _xml_ebnf(schema_json: str, style: str) -> str:
    fmt = {"type": "json_schema", "json_schema": json.loads(schema_json), "style": style}
    return str(xgrammar().Grammar.from_structural_tag(json.dumps({"type": "structural_tag", "format": fmt})))
