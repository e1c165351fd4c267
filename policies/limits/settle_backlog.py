"""Settlements the limiter's store missed, kept for later tries: a bounded backlog drained by one worker.

However long an outage and however many requests meet it, the backlog holds at most `capacity` settlements (one per
admission: a second settle of the same holder joins the first) and runs one task. While the store is away the worker
tries only the oldest settlement once per pause (`retry_delays_s`, then doubling up to RETRY_CAP_S, or at once when
the store answers another call), so an outage costs one call per pause, not one per request; once a try lands, the
rest go AT_ONCE at a time. A settlement dropped (the backlog full: the oldest goes, the one nearest its lease's end),
given up (`give_up_s` after its first miss) or abandoned at close is counted in `dropped` and logged: the store
still holds its reservation, which expires by itself (its slot after the lease, its window entry after 60 s; its
day's tokens stay charged as reserved).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .model import Admission

log = logging.getLogger("policies.limits")

SETTLE_RETRY_DELAYS_S = (0.5, 1.0, 2.0)
"""The pauses before the first tries again (a closing limiter waits for them)."""


def first_tries_s(retry_delays_s: tuple[float, ...], store_timeout_s: float) -> float:
    """The longest the first tries again take against a store that does not answer: their pauses, and each try
    waiting for a turn and its call (`store_timeout_s` each); what a closing limiter gives its backlog."""
    return sum(retry_delays_s) + (len(retry_delays_s) + 1) * 2 * store_timeout_s


RETRY_CAP_S = 30.0
"""The longest pause between two tries while the store stays away (the pause doubles after the first ones)."""
AT_ONCE = 32
"""Settlements tried at once once the store answers: half the connection pool (redis_calls.CALLS_AT_ONCE), so live
requests keep their turns while an outage's backlog drains (10,000 in ~2 s on a loaded host, bench/RESULTS.md)."""
CAPACITY = 10_000
"""Settlements held at most (about 1.3 KB each by tracemalloc: 13 MB); past it the oldest is dropped to its lease."""
DROP_LOG_EVERY_S = 10.0
"""The least time between two log lines about dropped settlements (each line says how many so far)."""


@dataclass
class MissedSettle:
    """One settlement the store missed: what to send again, and since when (loop time)."""

    admission: Admission
    used_tokens: int
    void: bool
    missed_at: float


class SettleBacklog:
    """Missed settlements, tried again by one worker until each lands, is given up or dropped."""

    def __init__(
        self,
        try_once: Callable[[MissedSettle], Awaitable[bool]],
        store_answers: asyncio.Event,
        closing: asyncio.Event,
    ) -> None:
        self._try_once = try_once
        self._store_answers = store_answers
        self._closing = closing
        self._waiting: OrderedDict[str, MissedSettle] = OrderedDict()
        self._trying: dict[str, MissedSettle] = {}
        self._worker: asyncio.Task | None = None
        self._dropped_logged_at = float("-inf")
        self.retry_delays_s: tuple[float, ...] = SETTLE_RETRY_DELAYS_S
        """Pauses before the first tries again; none: each settlement is tried once more, then dropped."""
        self.give_up_s = 900.0
        """How long a settlement is tried again after its first miss (the Redis limiter's default slot lease)."""
        self.capacity = CAPACITY
        self.dropped = 0
        """Settlements left to their lease: the backlog full, given up, or abandoned at close."""

    @property
    def pending(self) -> int:
        """Settlements waiting or being tried."""
        return len(self._waiting) + len(self._trying)

    def add(self, admission: Admission, used_tokens: int, void: bool, *, tried: bool = True) -> None:
        """Keep a settlement the store missed (`tried`) or may not reach (nothing when one of this holder is kept
        already); one already tried waits for the first retry delay (without retries it is dropped)."""
        holder = admission.holder
        loop = asyncio.get_running_loop()
        missed = MissedSettle(admission, used_tokens, void, loop.time())
        if tried and not self.retry_delays_s:
            self._drop([missed], "no retries")
            return
        if holder in self._waiting or holder in self._trying:
            return
        self._waiting[holder] = missed
        self._trim()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.ensure_future(self._work(missed_first=tried))

    async def drained(self) -> None:
        """Wait until the worker has nothing left (landed, given up or dropped)."""
        while self._worker is not None and not self._worker.done():
            await asyncio.shield(self._worker)

    async def close(self, budget_s: float) -> None:
        """Let the worker finish its first tries (it stops past them, the limiter closing), `budget_s` at most."""
        if self._worker is None or self._worker.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._worker), budget_s)
        except TimeoutError:
            self._worker.cancel()
            self._drop(list(self._trying.values()) + list(self._waiting.values()), "the limiter closed")
            self._trying.clear()
            self._waiting.clear()

    async def _work(self, missed_first: bool) -> None:
        loop = asyncio.get_running_loop()
        misses = 0
        pause = 0.0
        skip_round = missed_first  # its first try just missed: the first pause comes first
        while self._waiting:
            at_once = AT_ONCE if misses == 0 and self._store_answers.is_set() else 1  # else one probes the store
            if not skip_round and await self._round(at_once):
                misses = 0
                continue
            skip_round = False
            misses += 1
            self._give_up_before(loop.time() - self.give_up_s)
            if not self.retry_delays_s:
                continue
            quick = misses <= len(self.retry_delays_s)
            if self._closing.is_set() and not quick:
                self._drop(list(self._waiting.values()), "the limiter closed")
                self._waiting.clear()
                return
            pause = self.retry_delays_s[misses - 1] if quick else min(RETRY_CAP_S, pause * 2)
            await self._pause(pause, wake_on_close=not quick)

    async def _round(self, size: int) -> bool:
        """Try the `size` oldest at once; True when every try landed. Those missed go back in front (or are dropped
        when there are no retries)."""
        batch = [self._waiting.popitem(last=False) for _ in range(min(size, len(self._waiting)))]
        self._trying.update(batch)
        try:
            landed = await asyncio.gather(*(self._try_once(missed) for _, missed in batch), return_exceptions=True)
        finally:
            for holder, _ in batch:
                self._trying.pop(holder, None)
        for failure in (outcome for outcome in landed if isinstance(outcome, Exception)):
            log.error("a settlement's retry failed: %r", failure)  # a bug, not the store: tried again all the same
        missed = [(holder, settle) for (holder, settle), ok in zip(batch, landed, strict=True) if ok is not True]
        if not self.retry_delays_s:
            self._drop([settle for _, settle in missed], "no retries")
            return not missed
        for holder, settle in reversed(missed):
            self._waiting[holder] = settle
            self._waiting.move_to_end(holder, last=False)
        self._trim()
        return not missed

    async def _pause(self, seconds: float, *, wake_on_close: bool) -> None:
        """`seconds`, or less when the store answers another call (or the limiter closes, with `wake_on_close`)."""
        waits = [asyncio.ensure_future(self._store_answers.wait())]
        if wake_on_close:
            waits.append(asyncio.ensure_future(self._closing.wait()))
        try:
            await asyncio.wait(waits, timeout=seconds)
        finally:
            for wait in waits:
                wait.cancel()

    def _trim(self) -> None:
        """Drop the oldest waiting past `capacity` (those being tried included)."""
        excess = min(len(self._waiting), self.pending - self.capacity)
        if excess > 0:
            dropped = [self._waiting.popitem(last=False)[1] for _ in range(excess)]
            self._drop(dropped, f"the backlog is full ({self.capacity})")

    def _give_up_before(self, missed_before: float) -> None:
        expired = []
        while self._waiting and next(iter(self._waiting.values())).missed_at <= missed_before:
            expired.append(self._waiting.popitem(last=False)[1])
        self._drop(expired, f"the store stayed unreachable for {self.give_up_s:g} s")

    def _drop(self, settles: list[MissedSettle], why: str) -> None:
        if not settles:
            return
        self.dropped += len(settles)
        now = asyncio.get_running_loop().time()
        if now - self._dropped_logged_at < DROP_LOG_EVERY_S:
            return
        self._dropped_logged_at = now
        last = settles[-1].admission
        log.error(
            "%d settlement(s) dropped (%d so far; the last: tenant %s charge %s): %s; each reservation expires by "
            "itself (its slot at the end of its lease)",
            len(settles),
            self.dropped,
            last.tenant,
            last.charge_id,
            why,
        )
