"""The JSON schema an OpenAI `response_format` asks for."""

from __future__ import annotations

from typing import Any

ANY_OBJECT: dict[str, Any] = {"type": "object"}


def response_schema(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """The schema of a json_object / json_schema response_format; None for plain text."""
    kind = (response_format or {}).get("type")
    if kind == "json_object":
        return ANY_OBJECT
    if kind == "json_schema":
        return response_format.get("json_schema", {}).get("schema") or ANY_OBJECT
    return None
