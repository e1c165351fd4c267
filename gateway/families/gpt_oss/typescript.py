"""Tool declarations in Harmony's TypeScript-like syntax, as openai-harmony (the renderer vLLM serves gpt-oss with)
writes them: `type NAME = (_: {…}) => any;` per tool of the `functions` namespace.

Its rules, which the checkpoint's chat template only partly shares: nested fields indented four spaces deeper, the
closing brace at the fields' indent; `oneOf` as one `| variant` line each; `anyOf`, `allOf`, `$ref`, `null` and a
schema without a type are `any`; a string enum lists its strings only; an array is `ITEMS[]` (no items:
`Array<any>`); `nullable` adds `| null`; titles, descriptions and examples are comments above a field, a default
after it (a string default quoted unless the field is an enum, others compact JSON); descriptions are written as
given (only a tool's description is commented line by line); declared parameters, even with no properties, are
`(_: {…})`, none at all (None, or the `UndeclaredParameters` validation fills in) `()`.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.types import UndeclaredParameters


def tool_namespace(tools: list[dict[str, Any]]) -> str:
    """The `functions` namespace of `tools`."""
    out = "## functions\n\nnamespace functions {\n\n"
    for tool in tools:
        fn = tool["function"]
        out += "".join(f"// {line}\n" for line in _lines(fn.get("description") or ""))
        parameters = fn.get("parameters")
        undeclared = parameters is None or isinstance(parameters, UndeclaredParameters)
        signature = "()" if undeclared else f"(_: {typescript_type(parameters, '')})"
        out += f"type {fn['name']} = {signature} => any;\n\n"
    return out + "} // namespace functions"


def typescript_type(schema: Any, indent: str) -> str:
    """`schema` as a type; `indent` is the indent of an object's fields."""
    if not isinstance(schema, dict):
        return "any"
    variants = schema.get("oneOf")
    if isinstance(variants, list):
        return "".join(f"\n{indent} | {_variant(v, indent, described=True)}" for v in variants)
    kind = schema.get("type")
    if isinstance(kind, list) and any(isinstance(k, str) for k in kind):
        return " | ".join("number" if k == "integer" else k for k in kind if isinstance(k, str))
    if kind == "object":
        return _object(schema, indent)
    if kind == "string":
        enum = schema.get("enum")
        strings = [f'"{v}"' for v in enum if isinstance(v, str)] if isinstance(enum, list) else []
        return " | ".join(strings) if strings else "string"
    if kind in ("number", "integer"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "array":
        return f"{typescript_type(schema['items'], indent)}[]" if "items" in schema else "Array<any>"
    return "any"


def _object(schema: dict[str, Any], indent: str) -> str:
    description = schema.get("description")
    out = f"{indent}// {description}\n{{\n" if isinstance(description, str) else "{\n"
    properties = schema.get("properties")
    if isinstance(properties, dict):
        required = schema.get("required")
        required = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
        for key, spec in properties.items():
            out += _field(key, spec if isinstance(spec, dict) else {}, key in required, indent)
    return out + f"{indent}}}"


def _field(key: str, spec: dict[str, Any], required: bool, indent: str) -> str:
    optional = "" if required else "?"
    out = f"{indent}// {spec['title']}\n{indent}//\n" if isinstance(spec.get("title"), str) else ""
    description = spec.get("description") if isinstance(spec.get("description"), str) else None
    if description is not None and "oneOf" not in spec:
        out += f"{indent}// {description}\n"
    examples = spec.get("examples")
    if isinstance(examples, list) and examples:
        out += f"{indent}// Examples:\n" + "".join(f'{indent}// - "{e}"\n' for e in examples if isinstance(e, str))
    variants = spec.get("oneOf")
    if isinstance(variants, list):
        first = variants[0].get("description") if variants and isinstance(variants[0], dict) else None
        above = description is not None and description != first
        if above:
            out += f"{indent}// {description}\n"
        if "default" in spec:
            out += f"{indent}// {_default(spec)}\n"
        out += f"{indent}{key}{optional}:\n"
        for i, variant in enumerate(variants):
            line = _variant(variant, indent, described=not (i == 0 and above), skip=description)
            out += f"{indent} | {line}\n"
        return out + f"{indent},\n"
    out += f"{indent}{key}{optional}: {_nullable(spec, typescript_type(spec, indent + '    '))},"
    if "default" in spec and "oneOf" not in spec:
        out += f" // {_default(spec)}"
    return out + "\n"


def _variant(variant: Any, indent: str, described: bool, skip: str | None = None) -> str:
    """One `oneOf` member's type, then its description (unless `skip` spells it) and default as one comment."""
    text = _nullable(variant, typescript_type(variant, indent + "   "))
    if not isinstance(variant, dict):
        return text
    comments = []
    description = variant.get("description")
    if described and isinstance(description, str) and description != skip:
        comments.append(description)
    if "default" in variant:
        comments.append(_default(variant))
    return f"{text} // {' '.join(comments)}" if comments else text


def _nullable(schema: Any, text: str) -> str:
    nullable = isinstance(schema, dict) and schema.get("nullable") is True
    return f"{text} | null" if nullable and "null" not in text else text


def _default(schema: dict[str, Any]) -> str:
    """`default: …`: a string quoted as it is (unquoted for an enum), anything else as compact JSON."""
    value = schema["default"]
    if isinstance(value, str):
        enum = schema.get("enum")
        return f"default: {value}" if isinstance(enum, list) and enum else f'default: "{value}"'
    return "default: " + json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _lines(text: str) -> list[str]:
    """`text`'s lines as Rust's `str::lines` gives them: split at `\\n`, a trailing `\\r` dropped, no last empty."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    return lines[:-1] if lines[-1] == "" else lines
