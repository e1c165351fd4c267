"""Requests that arrive together start a few per event-loop iteration, so answers already under way go first.

A request's work before its backend request (body, validation, render, encode, admission) runs without yielding.
When 64 requests arrive at once, the loop would run all 64 of those before it looks at its sockets again, so even
the first request's backend answer waits until the last request has been sent: every request of the burst gets its
first token after all 64 have been planned. Taking turns, the next few requests start in the next iteration, after
the loop has polled its sockets and run what they woke (the first answers' heads and first tokens), and so on: a
request's first token comes after the work of the requests before it, not of all of them (`bench/burst_timeline.py`
shows both orders). A request that finds a turn left in this iteration and nobody waiting starts at once, without
yielding, so requests that do not arrive together never wait.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

PER_ITERATION = 8
"""Requests started per loop iteration. Fewer interleave finer but stretch a burst's start over more iterations, and
the running streams' token events (read one at a time, no longer several per read) then fill them: with one per
iteration a burst of 64 x 32-token streams spent twice the loop CPU before its last first token; eight kept most
of the gain for the median first token at the least added CPU (bench/RESULTS.md, "Per-request cost, session 6")."""
MAX_WAIT_S = 0.01
"""A request that has waited this long starts in the next iteration whatever the count: the wait stays bounded
when the iterations are long (many running streams' events in each), and a burst's last requests are not held
behind the first ones' token events."""


class Turns:
    """At most `per_iteration` requests start per event-loop iteration, and those waiting `max_wait_s` or more; the
    others wait in arrival order."""

    __slots__ = ("_max_wait_s", "_per_iteration", "_taken", "_waiting")

    def __init__(self, per_iteration: int = PER_ITERATION, max_wait_s: float = MAX_WAIT_S) -> None:
        self._per_iteration = per_iteration
        self._max_wait_s = max_wait_s
        self._taken = 0
        self._waiting: deque[tuple[float, asyncio.Future[None]]] = deque()

    def take(self) -> asyncio.Future[None] | None:
        """None: start now (this iteration has a turn left); else a future to await, done when the turn comes."""
        loop = asyncio.get_running_loop()
        if self._taken < self._per_iteration and not self._waiting:
            if not self._taken:
                loop.call_soon(self._pass)
            self._taken += 1
            return None
        waiting = loop.create_future()
        self._waiting.append((time.monotonic(), waiting))
        return waiting

    def _pass(self) -> None:
        """A new iteration: the next waiters in line (those still waiting) take its turns, and every overdue one."""
        self._taken = 0
        overdue = time.monotonic() - self._max_wait_s
        while self._waiting:
            since, waiting = self._waiting[0]
            if self._taken >= self._per_iteration and since > overdue:
                break
            self._waiting.popleft()
            if not waiting.done():  # a cancelled waiter (its request ended) gives its turn on
                waiting.set_result(None)
                self._taken += 1
        if self._taken:
            asyncio.get_running_loop().call_soon(self._pass)
