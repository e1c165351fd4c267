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


def window_headers(
    limits: Limits,
    use: tuple[int, int, int],
    model_limits: Limits | None = None,
    model_use: tuple[int, int, int] | None = None,
    refused: tuple[str | None, str] | None = None,
) -> dict[str, str]:
    """`x-ratelimit-{limit,remaining,reset}-{requests,tokens}` for the per-minute limits that apply: of each kind, the
        one with the least remaining, the tenant's own or its model's (`model_limits`, whose window is `model_use`; the
        model's on a tie, the narrower), or the one that refused (`refused`: (kind, scope)). A window's use is (requests,
    tokens, reset ms), as in WindowUse.

        `reset` is OpenAI's "time until the limit resets to its initial state": when that sliding window is empty again.
    """
    headers: dict[str, str] = {}
    written: dict[int, str] = {}  # reset ms -> as written (both kinds share one window's, most often)
    for kind, field, used_at in KINDS:
        limit = getattr(limits, field)
        chosen = None if limit is None else (limit, use[used_at], use[2])
        own = None if model_limits is None or model_use is None else getattr(model_limits, field)
        if own is not None and refused != (kind, "tenant"):
            used = model_use[used_at]
            if chosen is None or refused == (kind, "model") or own - used <= chosen[0] - chosen[1]:
                chosen = (own, used, model_use[2])
        if chosen is not None:
            limit, used, reset_ms = chosen
            headers[f"x-ratelimit-limit-{kind}"] = str(limit)
            headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, limit - used))
            if reset_ms not in written:
                written[reset_ms] = duration(reset_ms)
            headers[f"x-ratelimit-reset-{kind}"] = written[reset_ms]
    return headers


KINDS = (("requests", "requests_per_minute", 0), ("tokens", "tokens_per_minute", 1))
"""Each kind of the headers: its per-minute limit, and where a WindowUse holds its count."""
REFUSED_KIND = {"requests_per_minute": "requests", "tokens_per_minute": "tokens"}


def rate_limit_headers(limits: Limits, verdict: Verdict, model_limits: Limits | None = None) -> dict[str, str]:
    """The `x-ratelimit-*` headers (window_headers) after an admit, and `retry-after` on a refusal."""
    refused = None if verdict.allowed else (REFUSED_KIND.get(verdict.limit or ""), verdict.scope)
    use = (verdict.requests, verdict.tokens, verdict.reset_ms)
    headers = window_headers(limits, use, model_limits, verdict.model_use, refused)
    if not verdict.allowed and verdict.retry_ms is not None:
        headers["retry-after"] = str(max(1, math.ceil(verdict.retry_ms / 1000)))
        headers["retry-after-ms"] = str(max(0, verdict.retry_ms))
    return headers


def after_settle(
    headers: Mapping[str, str], window: WindowUse, limits: Limits, model_limits: Limits | None = None
) -> dict[str, str]:
    """`headers` with their `x-ratelimit-*` recomputed from what the windows hold now (after a settle)."""
    out = {k: v for k, v in headers.items() if not k.startswith("x-ratelimit-")}
    return {**out, **window_headers(limits, window, model_limits, window.model)}


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
