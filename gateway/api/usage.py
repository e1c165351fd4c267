"""Token usage in OpenAI's shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def usage(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0, reasoning_tokens: int | None = None
) -> dict[str, Any]:
    """`usage`: the prompt counted once however many choices were generated from it; `completion_tokens_details`
    when the answer reasoned (`reasoning_tokens` not None), as OpenAI's chat usage for a reasoning model."""
    out = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }
    if reasoning_tokens is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return out


def reasoning_tokens(completion_tokens: int, reasoning: str, count_tokens: Callable[[str], int]) -> int:
    """How many of a choice's `completion_tokens` were its reasoning: the parsed reasoning text encoded again (the
    markers around it are not counted), never more than the choice's tokens."""
    return min(completion_tokens, count_tokens(reasoning)) if reasoning else 0
