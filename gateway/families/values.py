"""Argument values written as raw text (Qwen XML, GLM): the tool's schema says what JSON each stands for."""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

_INTEGER = re.compile(r"-?\d+")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_ORDER = ("null", "integer", "number", "boolean", "object", "array")


def strict_json(text: str) -> Any:
    """`text` as JSON; ValueError when it is not JSON or holds a number no JSON parser gives back: NaN, Infinity, or a
    float past a double's range (`1e999`, which Python reads as inf and would write back as `Infinity`), or nests
    deeper than Python's recursion lets the parser read (a model's `[[[…]]]`: no value, never a crash)."""
    try:
        return json.loads(text, parse_constant=_not_json, parse_float=_finite_float)
    except RecursionError:
        raise ValueError("the JSON nests too deeply") from None


def json_keeping_text(text: str) -> Any:
    """`text` as JSON, a number no JSON parser gives back (NaN, Infinity, a float past a double) kept as its text, a
    string (as a typed value and hermes' streamed arguments keep it); ValueError when it is not JSON otherwise."""
    try:
        return json.loads(text, parse_constant=str, parse_float=_float_or_text)
    except RecursionError:
        raise ValueError("the JSON nests too deeply") from None


def _float_or_text(text: str) -> float | str:
    value = float(text)
    return text if math.isinf(value) else value


def writes_as_json(value: Any) -> bool:
    """Whether `value` (a Python literal read from model text) writes as JSON: no NaN or infinity, JSON types only."""
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return False
    return True


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} overflows a double")
    return value


class Parameters(dict[str, Any]):
    """A tool's declared parameter schemas by name (its `properties`); `patterns`: its `patternProperties`, each
    pattern compiled (None where Python's `re` cannot read it); `other`: the schema of a name neither declares nor
    matches (its `additionalProperties` when that is a schema), else None."""

    patterns: tuple[tuple[re.Pattern[str] | None, Any], ...] = ()
    other: Mapping[str, Any] | None = None


def tool_schemas(tools: Iterable[Mapping[str, Any]]) -> dict[str, Parameters]:
    """Each offered tool's `Parameters`, by tool name."""
    return {
        fn["name"]: _parameters(fn.get("parameters"))
        for fn in (t.get("function", t) for t in tools)
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str)
    }


def _parameters(schema: Any) -> Parameters:
    schema = schema if isinstance(schema, Mapping) else {}
    properties = schema.get("properties")
    parameters = Parameters(properties if isinstance(properties, Mapping) else {})
    patterns = schema.get("patternProperties")
    if isinstance(patterns, Mapping):
        parameters.patterns = tuple((_compiled(p), s) for p, s in patterns.items())
    other = schema.get("additionalProperties")
    if isinstance(other, Mapping):
        parameters.other = other
    return parameters


def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except (re.error, TypeError, RecursionError, OverflowError):
        return None


def argument_types(schemas: Mapping[str, Mapping[str, Any]], tool: str, key: str) -> frozenset[str]:
    """The JSON types argument `key` of `tool` may take (`schema_types`): by its declared schema in `schemas` (by
    tool name, as `tool_schemas` gives them), else by the `patternProperties` schemas whose pattern it matches (the
    types they all allow), else by the tool's schema of other names (`Parameters.other`); none known when neither
    says or a pattern cannot be read."""
    parameters = schemas.get(tool)
    if parameters is None:
        return frozenset()
    if key in parameters:
        return schema_types(parameters[key])
    patterns = getattr(parameters, "patterns", ())
    if any(pattern is None for pattern, _ in patterns):
        return frozenset()
    matched = [schema_types(schema) for pattern, schema in patterns if pattern is not None and pattern.search(key)]
    if matched:
        known = [types for types in matched if types]
        return frozenset.intersection(*known) if known else frozenset()
    return schema_types(getattr(parameters, "other", None))


def schema_types(schema: Mapping[str, Any] | None) -> frozenset[str]:
    """The JSON types a parameter schema allows (`type`, a list of types, `anyOf` / `oneOf` members, `enum`)."""
    if not isinstance(schema, Mapping):
        return frozenset()
    declared = schema.get("type")
    if isinstance(declared, str):
        return frozenset({declared})
    if isinstance(declared, list):
        return frozenset(t for t in declared if isinstance(t, str))
    members = [m for key in ("anyOf", "oneOf") for m in schema.get(key) or () if isinstance(m, Mapping)]
    if members:
        return frozenset().union(*(schema_types(m) for m in members))
    if isinstance(schema.get("enum"), list) and all(isinstance(v, str) for v in schema["enum"]):
        return frozenset({"string"})
    return frozenset()


def is_plain_string(types: frozenset[str]) -> bool:
    """A value of these types is always its text: it can stream as a JSON string while it arrives."""
    return types == {"string"}


def convert(raw: str, types: frozenset[str]) -> Any:
    """The JSON value of parameter text `raw` for a parameter of `types` (none known: JSON if it parses, else text).
    Where a string is one of the types, text with whitespace around it is that string (`  null` is no null, as
    vLLM's and SGLang's Qwen3-Coder parsers read it; the XML grammars write another type's value bare)."""
    if is_plain_string(types) or ("string" in types and raw != raw.strip()):
        return raw
    for kind in _ORDER if types else ("json",):
        if kind in types or kind == "json":
            value = _as(kind, raw.strip())
            if value is not _NO:
                return value
    return raw


_NO = object()


def _as(kind: str, text: str) -> Any:
    if kind == "null":
        return None if text.lower() in ("null", "none") else _NO
    if kind == "integer":
        return _integer(text) if _INTEGER.fullmatch(text) else _NO
    if kind == "number":
        if not _NUMBER.fullmatch(text):
            return _NO
        if _INTEGER.fullmatch(text):
            return _integer(text)
        number = float(text)
        return number if math.isfinite(number) else _NO
    if kind == "boolean":
        return {"true": True, "false": False}.get(text.lower(), _NO)
    if kind in ("object", "array"):
        value = _structured(text)
        return value if isinstance(value, dict if kind == "object" else list) else _NO
    try:
        return strict_json(text)
    except ValueError:
        return _NO


def _integer(text: str) -> Any:
    """The integer `text` spells, or nothing past Python's digit limit (which JSON could not write back either)."""
    try:
        return int(text)
    except ValueError:
        return _NO


def _structured(text: str) -> Any:
    """JSON, else a Python literal (Qwen models sometimes write `True` or single quotes) that writes as JSON, else
    nothing (a non-finite number in either is no value: the text stays a string, as SGLang's and vLLM's coercion)."""
    try:
        return strict_json(text)
    except ValueError:
        pass
    try:
        value = ast.literal_eval(text) if len(text) < 100_000 else _NO
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return _NO
    return value if writes_as_json(value) else _NO
