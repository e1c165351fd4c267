"""Chat-template helpers the template-rendered families share."""

from __future__ import annotations

import json
from typing import Any

from gateway.prompts.template import template_variables


def choose_template(own: str | None, builtin: str, override: str | None = None) -> str:
    """The template in use: an explicit override, else the checkpoint's if it reads `tools`, else `builtin`."""
    if override:
        return override
    if own and "tools" in template_variables(own):
        return own
    return builtin


def with_argument_objects(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages whose tool calls carry their arguments as objects, as Qwen's templates iterate them."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = {**message, "tool_calls": [_decoded(call) for call in calls]}
        out.append(message)
    return out


def _decoded(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    try:
        arguments = json.loads(fn["arguments"])
    except ValueError:
        return call
    return {**call, "function": {**fn, "arguments": arguments}} if isinstance(arguments, dict) else call
