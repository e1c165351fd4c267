"""OpenAI's rate-limit headers (`x-ratelimit-*`, `retry-after`) from a store's verdict."""

from __future__ import annotations

import math

from .model import Limits, Verdict


def duration(ms: int) -> str:
    """A duration as OpenAI writes it (Go's style): `17ms`, `1s`, `1.5s`, `6m0s`, `1h0m0s`."""
    ms = max(0, int(ms))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{minutes}m{seconds}"
    return seconds


def rate_limit_headers(limits: Limits, verdict: Verdict) -> dict[str, str]:
    """The `x-ratelimit-*` headers for the per-minute limits a tenant has, and `retry-after` on a refusal.

    `reset` is OpenAI's "time until the limit resets to its initial state": when the sliding window is empty again.
    """
    headers: dict[str, str] = {}
    reset = duration(verdict.reset_ms)
    for kind, limit, used in (
        ("requests", limits.requests_per_minute, verdict.requests),
        ("tokens", limits.tokens_per_minute, verdict.tokens),
    ):
        if limit is not None:
            headers[f"x-ratelimit-limit-{kind}"] = str(limit)
            headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, limit - used))
            headers[f"x-ratelimit-reset-{kind}"] = reset
    if not verdict.allowed and verdict.retry_ms is not None:
        headers["retry-after"] = str(max(1, math.ceil(verdict.retry_ms / 1000)))
        headers["retry-after-ms"] = str(max(0, verdict.retry_ms))
    return headers
