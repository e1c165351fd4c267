"""The limit checks on one tenant's sliding log, shared by the in-memory store (Redis runs the same in Lua)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import islice

from .model import CONCURRENCY_RETRY_MS, DAY_MS, RETRY_SCAN, WINDOW_MS, LimitName, Limits

SumsRetry = Callable[[int, int], int]
"""(need, 0 for tokens or 1 for requests) -> milliseconds until the window's oldest admissions have freed `need`,
read by the sums of their seconds and milliseconds (bounded, however many entries)."""


def free_at(entries: Iterable[Sequence[int]], need: int, by_sums: Callable[[int], int], now: int) -> int:
    """Milliseconds until the oldest (ts, weight) entries of the window have freed `need` weight; past the oldest
    RETRY_SCAN entries, `by_sums(need)`: the same time, read by the window's sums."""
    freed = 0
    for ts, weight in islice(entries, RETRY_SCAN):
        freed += weight
        if freed >= need:
            return max(0, ts + WINDOW_MS - now)
    return by_sums(need)


def fitted(limits: Limits, tokens: int, least: int, window_tokens: int, day_used: int) -> int:
    """`tokens`, or what the token limits leave when that is less, but never fewer than `least` (the admission is then
    checked, and refused, for `least`): a request whose budget is a default takes what it can use now."""
    room = tokens
    if limits.tokens_per_minute is not None:
        room = min(room, limits.tokens_per_minute - window_tokens)
    if limits.tokens_per_day is not None:
        room = min(room, limits.tokens_per_day - day_used)
    return max(least, room)


def worst_refusal(
    limits: Limits,
    tokens: int,
    now: int,
    log: Callable[[], Iterable[Sequence[int]]],
    window: tuple[int, int],
    by_sums: SumsRetry,
    slots: int,
    day_used: int,
    *,
    join: bool = False,
) -> tuple[LimitName, int | None] | None:
    """The limit that refuses this admission for longest (None retry: never fits), or None when every limit admits.

    `log()` gives the window's (timestamp ms, tokens, 1 for a request or 0 for a join) entries, oldest first; `window`
    its (requests, tokens); `by_sums` times a retry that needs more than its oldest RETRY_SCAN entries. A `join` (an admit of a charge still open) is no new
    request: requests_per_minute does not apply to it; its tokens, its slot and its day's tokens do.
    """
    refusals: list[tuple[LimitName, int | None]] = []
    rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
    requests, window_tokens = window
    if rpm is not None and not join and requests + 1 > rpm:
        need = requests + 1 - rpm
        retry = None if rpm == 0 else free_at(((ts, n) for ts, _, n in log()), need, lambda n: by_sums(n, 1), now)
        refusals.append(("requests_per_minute", retry))
    if tpm is not None and window_tokens + tokens > tpm:
        need = window_tokens + tokens - tpm
        retry = None if tokens > tpm else free_at(((ts, t) for ts, t, _ in log()), need, lambda n: by_sums(n, 0), now)
        refusals.append(("tokens_per_minute", retry))
    conc = limits.concurrent_requests
    if conc is not None and slots + 1 > conc:
        refusals.append(("concurrent_requests", None if conc == 0 else CONCURRENCY_RETRY_MS))
    tpd = limits.tokens_per_day
    if tpd is not None and day_used + tokens > tpd:
        refusals.append(("tokens_per_day", None if tokens > tpd else (now // DAY_MS + 1) * DAY_MS - now))
    return worst(refusals) if refusals else None


def worst(refusals: Sequence[tuple[LimitName, int | None] | None]) -> tuple[LimitName, int | None] | None:
    """The refusal that lasts longest: the first that never fits, else the first of the longest retries (None: none
    refused). Per scope, then across the tenant's and its model's (the same answer as over all of them at once)."""
    found = [r for r in refusals if r is not None]
    never = [r for r in found if r[1] is None]
    return never[0] if never else max(found, key=lambda r: r[1], default=None)
