"""Tool-call arguments that max_tokens cut short, read as far as they are complete."""

from __future__ import annotations

from typing import Any

import orjson


def completed_members(arguments: str) -> Any:
    """The JSON value of `arguments`; when max tokens cut it short, the object of the members completed before the
    cut (what a client's stream accumulates from the deltas it got: Anthropic's SDK parses them so)."""
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        pass
    depth, in_string, escaped, last_member = 0, False, False, 0
    for i, ch in enumerate(arguments):
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == "," and depth == 1:
            last_member = i
    try:
        return orjson.loads(arguments[:last_member] + "}") if last_member else {}
    except orjson.JSONDecodeError:
        return {}
