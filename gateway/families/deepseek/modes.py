"""Thinking on/off and the reasoning-effort budget of a request.

Thinking: `chat_template_kwargs.thinking`, else `chat_template_kwargs.enable_thinking`,
else on when the request names a `reasoning_effort` (off for "none"), else the
family default. Effort (thinking only): an int 1–100, a float 0–0.99 (×100),
or one of the encoder's names; anything else gets the default "high" (75).
"""

from __future__ import annotations

from typing import Any

from gateway.types import ChatRequest

EFFORT_BUDGETS = {"low": 50, "high": 75, "xhigh": 75, "max": 100}
DEFAULT_EFFORT = EFFORT_BUDGETS["high"]


def thinking_enabled(request: ChatRequest, default: bool) -> bool:
    """Whether the prompt opens a reasoning block for this request."""
    kwargs = request.template_kwargs
    for key in ("thinking", "enable_thinking"):
        if kwargs.get(key) is not None:
            return bool(kwargs[key])
    effort = _requested_effort(request)
    if effort is not None:
        return effort != "none"
    return default


def effort_budget(request: ChatRequest) -> int:
    """The 1–100 budget written into a thinking prompt."""
    value = _requested_effort(request)
    if isinstance(value, bool):
        return DEFAULT_EFFORT
    if isinstance(value, int):
        return value if 1 <= value <= 100 else DEFAULT_EFFORT
    if isinstance(value, float):
        return max(1, round(value * 100)) if 0.0 <= value <= 0.99 else DEFAULT_EFFORT
    return EFFORT_BUDGETS.get(value, DEFAULT_EFFORT) if isinstance(value, str) else DEFAULT_EFFORT


def _requested_effort(request: ChatRequest) -> Any:
    if request.reasoning_effort is not None:
        return request.reasoning_effort
    return request.template_kwargs.get("reasoning_effort")
