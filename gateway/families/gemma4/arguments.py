"""A call's arguments in Gemma 4's object notation as structural-tag formats (xgrammar 0.2.7 / 0.2.8).

`{key:value,…}` with bare keys, strings between two `<|"|>` TOKENS (`token` formats by id, the raw text
between them `any_tokens` excluding the call's and the quote's ids), numbers as regexes, true / false /
null, arrays and nested objects. Structural tags have no references, so only a finite schema can be
spelled out: a schema with `$ref`, a free-form object (no `properties`) or value (no `type`), or nesting
deeper than MAX_DEPTH has no format here (None), and the call keeps free text; so has a key or an enum string
holding `<` (a literal is text, and text could spell a control token). Properties are written in
the schema's declared order with `,` and no space; every required one must come, optional ones may.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Format = dict[str, Any]
MAX_DEPTH = 6
INTEGER = r"-?(0|[1-9][0-9]*)"
NUMBER = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"


def _const(text: str) -> Format:
    return {"type": "const_string", "value": text}


def _seq(*elements: Format) -> Format:
    return elements[0] if len(elements) == 1 else {"type": "sequence", "elements": list(elements)}


def _or(elements: list[Format]) -> Format:
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}


class ArgumentFormats:
    """Formats for values of a schema; `quote` is the `<|"|>` token format, `raw` a string's body."""

    def __init__(self, quote: Format, raw: Format):
        self.quote = quote
        self.raw = raw

    def arguments(self, schema: Any) -> Format | None:
        """The `{…}` of a call whose parameters are `schema`, or None when it cannot be spelled out."""
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return None
        return self._value(schema, 0)

    def _value(self, schema: Any, depth: int) -> Format | None:
        if not isinstance(schema, dict) or depth > MAX_DEPTH or "$ref" in schema:
            return None
        if "enum" in schema or "const" in schema:
            return self._literals(schema["enum"] if "enum" in schema else [schema["const"]])
        if "anyOf" in schema or "oneOf" in schema:
            return self._any(schema.get("anyOf") or schema.get("oneOf"), depth)
        kind = schema.get("type")
        if isinstance(kind, list):
            return self._any([{**schema, "type": k} for k in kind], depth)
        build: dict[str, Callable[[], Format | None]] = {
            "string": lambda: _seq(self.quote, self.raw, self.quote),
            "integer": lambda: {"type": "regex", "pattern": INTEGER},
            "number": lambda: {"type": "regex", "pattern": NUMBER},
            "boolean": lambda: _or([_const("true"), _const("false")]),
            "null": lambda: _const("null"),
            "array": lambda: self._array(schema, depth),
            "object": lambda: self._object(schema, depth),
        }
        return build[kind]() if kind in build else None

    def _any(self, options: Any, depth: int) -> Format | None:
        formats = [self._value(o, depth) for o in options] if isinstance(options, list) and options else [None]
        return None if any(f is None for f in formats) else _or(formats)

    def _literals(self, values: Any) -> Format | None:
        if not isinstance(values, list) or not values:
            return None
        formats: list[Format] = []
        for v in values:
            if isinstance(v, str) and "<" in v:
                return None  # written as text, it could spell a control token
            if isinstance(v, str):
                formats.append(_seq(self.quote, _const(v), self.quote) if v else _seq(self.quote, self.quote))
            elif v is None or isinstance(v, (bool, int, float)):
                formats.append(
                    _const("null" if v is None else "true" if v is True else "false" if v is False else repr(v))
                )
            else:
                return None
        return _or(formats)

    def _array(self, schema: dict[str, Any], depth: int) -> Format | None:
        item = self._value(schema.get("items"), depth + 1)
        if item is None:
            return None
        items = {"type": "optional", "content": _seq(item, {"type": "star", "content": _seq(_const(","), item)})}
        return _seq(_const("["), items, _const("]"))

    def _object(self, schema: dict[str, Any], depth: int) -> Format | None:
        properties = schema.get("properties")
        if not isinstance(properties, dict) or not properties:
            return None if schema.get("additionalProperties", True) is not False else _seq(_const("{"), _const("}"))
        required = set(schema.get("required") or [])
        members: list[tuple[Format, bool]] = []
        for key, sub in properties.items():
            value = self._value(sub, depth + 1)
            if value is None or any(c in key for c in ":,{}<"):
                return None
            members.append((_seq(_const(f"{key}:"), value), key in required))
        return _seq(_const("{"), self._members(members), _const("}"))

    @staticmethod
    def _members(members: list[tuple[Format, bool]]) -> Format:
        """Declared order; the first written member has no comma: one alternative per member that may be first."""
        alternatives: list[Format] = []
        for first, (member, _) in enumerate(members):
            rest = [_seq(_const(","), m) if req else {"type": "optional", "content": _seq(_const(","), m)}
                    for m, req in members[first + 1 :]]  # fmt: skip
            alternatives.append(_seq(member, *rest))
            if members[first][1]:
                return _or(alternatives)  # a required member cannot be skipped
        return {"type": "optional", "content": _or(alternatives)}  # every member optional: `{}` too
