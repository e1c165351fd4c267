"""A `<think>` reasoning block in front of a constrained answer, for families whose reasoning is a think block."""

from __future__ import annotations

import json
from typing import Any

from backends.base import Grammar

Format = dict[str, Any]


def with_reasoning(
    answer: Format, *, prompt_opens_reasoning: bool, reasoning_optional: bool, think: tuple[str, str]
) -> Grammar:
    """A structural tag: `answer`, after the reasoning block where it could otherwise be rejected.

    A prompt that opened the think block always needs its end. A strict answer (forced calls, JSON)
    gets an optional complete `think[0]…think[1]` block (`think[1]` with the whitespace the model writes
    after it); lazy calls already allow any text, a think block included.
    """
    start, end = think
    reasoning: Format | None = None
    if prompt_opens_reasoning:
        reasoning = _block("", end)
    elif reasoning_optional:
        reasoning = {"type": "optional", "content": _block(start, end)}
    fmt = answer if reasoning is None else {"type": "sequence", "elements": [reasoning, answer]}
    return Grammar("structural_tag", json.dumps({"type": "structural_tag", "format": fmt}, ensure_ascii=False))


def _block(begin: str, end: str) -> Format:
    return {"type": "tag", "begin": begin, "content": {"type": "any_text"}, "end": end}
