"""The limit checks on one tenant's sliding log, shared by the in-memory store (Redis runs the same in Lua)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from .model import CONCURRENCY_RETRY_MS, DAY_MS, WINDOW_MS, LimitName, Limits


def free_at(entries: Iterable[Sequence[int]], need: int, now: int) -> int:
    """Milliseconds until the oldest (ts, weight) entries of the window have freed `need` weight."""
    freed = 0
    for ts, weight in entries:
        freed += weight
        if freed >= need:
            return max(0, ts + WINDOW_MS - now)
    return WINDOW_MS


def worst_refusal(
    limits: Limits,
    tokens: int,
    now: int,
    log: Collection[Sequence[int]],
    window: tuple[int, int],
    slots: int,
    day_used: int,
    *,
    join: bool = False,
) -> tuple[LimitName, int | None] | None:
    """The limit that refuses this admission for longest (None retry: never fits), or None when every limit admits.

    `log` holds the window's (timestamp ms, tokens, 1 for a request or 0 for a join) entries, oldest first; `window`
    its (requests, tokens). A `join` (an admit of a charge still open) is no new request: requests_per_minute does
    not apply to it; its tokens, its slot and its day's tokens do.
    """
    refusals: list[tuple[LimitName, int | None]] = []
    rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
    requests, window_tokens = window
    if rpm is not None and not join and requests + 1 > rpm:
        retry = None if rpm == 0 else free_at(((ts, n) for ts, _, n in log), requests + 1 - rpm, now)
        refusals.append(("requests_per_minute", retry))
    if tpm is not None and window_tokens + tokens > tpm:
        retry = None if tokens > tpm else free_at(((ts, t) for ts, t, _ in log), window_tokens + tokens - tpm, now)
        refusals.append(("tokens_per_minute", retry))
    conc = limits.concurrent_requests
    if conc is not None and slots + 1 > conc:
        refusals.append(("concurrent_requests", None if conc == 0 else CONCURRENCY_RETRY_MS))
    tpd = limits.tokens_per_day
    if tpd is not None and day_used + tokens > tpd:
        refusals.append(("tokens_per_day", None if tokens > tpd else (now // DAY_MS + 1) * DAY_MS - now))
    if not refusals:
        return None
    never = [r for r in refusals if r[1] is None]
    return never[0] if never else max(refusals, key=lambda r: r[1])
