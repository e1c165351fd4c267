"""OpenAI's rate-limit headers (`x-ratelimit-*`, `retry-after`) from a store's verdict, and Anthropic's names for them."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping

from .model import Limits, Verdict, WindowUse


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


def after_settle(headers: Mapping[str, str], window: WindowUse) -> dict[str, str]:
    """`headers` with their `x-ratelimit-remaining-*` and `-reset-*` recomputed from what the window holds now (after
    a settle)."""
    out = dict(headers)
    reset = duration(window.reset_ms)
    for kind, used in (("requests", window.requests), ("tokens", window.tokens)):
        if f"x-ratelimit-remaining-{kind}" in out:
            out[f"x-ratelimit-remaining-{kind}"] = str(max(0, int(out[f"x-ratelimit-limit-{kind}"]) - used))
            out[f"x-ratelimit-reset-{kind}"] = reset
    return out


def anthropic_rate_limit_headers(openai: Mapping[str, str], reset_at_s: float) -> dict[str, str]:
    """Anthropic's names for the same figures (`anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`), the
    reset as the RFC 3339 time at which the window is empty again (`reset_at_s`, epoch seconds)."""
    reset = dt.datetime.fromtimestamp(math.ceil(reset_at_s), dt.UTC).isoformat().replace("+00:00", "Z")
    headers: dict[str, str] = {}
    for kind in ("requests", "tokens"):
        if f"x-ratelimit-limit-{kind}" in openai:
            headers[f"anthropic-ratelimit-{kind}-limit"] = openai[f"x-ratelimit-limit-{kind}"]
            headers[f"anthropic-ratelimit-{kind}-remaining"] = openai[f"x-ratelimit-remaining-{kind}"]
            headers[f"anthropic-ratelimit-{kind}-reset"] = reset
    return headers
