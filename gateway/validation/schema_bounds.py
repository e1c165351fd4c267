"""Bounds on client JSON values and a shape check for the JSON schemas in tools and response_format."""

from __future__ import annotations

from typing import Any

from gateway.errors import invalid

MAX_DEPTH = 64
"""Nesting of any client-supplied JSON value (schemas, arguments, template kwargs)."""
MAX_NODES = 100_000
_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONE = (
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
)


def check_bounded(value: Any, param: str) -> None:
    """400 when `value` nests deeper than MAX_DEPTH or holds more than MAX_NODES values."""
    stack = [(value, 1)]
    nodes = 0
    while stack:
        v, depth = stack.pop()
        nodes += 1
        if depth > MAX_DEPTH:
            raise invalid(f"'{param}' is nested deeper than {MAX_DEPTH} levels", param)
        if nodes > MAX_NODES:
            raise invalid(f"'{param}' holds more than {MAX_NODES} values", param)
        if isinstance(v, dict):
            stack.extend((c, depth + 1) for c in v.values())
        elif isinstance(v, list):
            stack.extend((c, depth + 1) for c in v)


def check_schema(schema: Any, param: str, *, object_root: bool) -> None:
    """400 unless `schema` is shaped like a JSON schema (keywords with the right kinds of values)."""
    check_bounded(schema, param)
    if not isinstance(schema, dict):
        raise invalid(f"'{param}' must be a JSON schema object", param)
    if object_root and schema.get("type", "object") != "object":
        raise invalid(f"'{param}' must be a schema of type 'object'", param)
    stack = [(schema, param)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            raise invalid(f"'{where}' must be a schema (an object or a boolean)", where)
        _check_type(node.get("type"), f"{where}.type")
        required = node.get("required")
        if required is not None and not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
            raise invalid(f"'{where}.required' must be an array of strings", f"{where}.required")
        enum = node.get("enum")
        if enum is not None and not isinstance(enum, list):
            raise invalid(f"'{where}.enum' must be an array", f"{where}.enum")
        for key in _SCHEMA_MAPS:
            sub = node.get(key)
            if sub is None:
                continue
            if not isinstance(sub, dict):
                raise invalid(f"'{where}.{key}' must be an object of schemas", f"{where}.{key}")
            stack.extend((s, f"{where}.{key}.{name}") for name, s in sub.items())
        for key in _SCHEMA_LISTS:
            sub = node.get(key)
            if sub is None:
                continue
            if not isinstance(sub, list):
                raise invalid(f"'{where}.{key}' must be an array of schemas", f"{where}.{key}")
            stack.extend((s, f"{where}.{key}[{i}]") for i, s in enumerate(sub))
        for key in _SCHEMA_ONE:
            if key in node:
                stack.append((node[key], f"{where}.{key}"))
        items = node.get("items")
        if isinstance(items, list):  # draft-04 tuple form
            stack.extend((s, f"{where}.items[{i}]") for i, s in enumerate(items))
        elif items is not None:
            stack.append((items, f"{where}.items"))


def _check_type(value: Any, where: str) -> None:
    names = value if isinstance(value, list) else [value] if value is not None else []
    if not isinstance(value, (str, list, type(None))) or any(n not in _JSON_TYPES for n in names):
        raise invalid(f"'{where}' must be a JSON type name or an array of them", where)
