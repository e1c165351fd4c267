"""FairQueue: fair admission to one model's backend capacity across tenants (start-time fair queuing)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass


class QueueTimeout(Exception):
    """A request waited `timeout_s` for a slot of its model's backends without getting one."""


@dataclass
class _Waiter:
    future: asyncio.Future
    cost: float  # virtual service: cost_tokens / weight
    seq: int


class FairQueue:
    """`capacity` slots of one model's backends shared fairly by tenants, in one gateway process.

    Start-time fair queuing at tenant level: each tenant has a virtual finish time F; when a slot frees, the tenant
    whose next request has the smallest start tag max(V, F) gets it (ties: the earlier arrival), then
    F = start + cost_tokens / weight and the virtual time V advances to that start. Service is thus shared by tokens,
    not by requests, in proportion to the weights; a tenant that was idle gets no credit for it (its start is V), and a
    tenant that arrives while another floods starts at the next slot that frees (its start V is below the flooder's
    F). Requests of one tenant run in arrival order. Tags are computed only when a slot is given, so a request that
    times out or is cancelled while waiting leaves no trace. Each gateway replica shares fairly what it sends; the
    queue is not shared across replicas.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._busy = 0
        self._running: dict[str, int] = {}
        self._queues: dict[str, deque[_Waiter]] = {}
        self._finish: dict[str, float] = {}
        """Each tenant's F, kept while it is above V (an F at or below V counts as none: its start is V)."""
        self._vtime = 0.0
        self._seq = itertools.count()
        self._due: list[tuple[int, str]] = []
        """Heap of (head seq, tenant): the waiting tenants whose start tag is V (F <= V), in arrival order."""
        self._later: list[tuple[float, int, str]] = []
        """Heap of (F, head seq, tenant): the waiting tenants whose start tag is their F (F > V)."""
        self._filed: dict[str, tuple[float, int]] = {}
        """The (F, head seq) each waiting tenant is filed under now; heap entries that differ are stale, skipped."""

    @property
    def waiting(self) -> dict[str, int]:
        """Requests waiting for a slot, per tenant."""
        return {tenant: len(queue) for tenant, queue in self._queues.items()}

    @property
    def running(self) -> dict[str, int]:
        """Requests holding a slot, per tenant."""
        return dict(self._running)

    @asynccontextmanager
    async def slot(self, tenant: str, weight: float, cost_tokens: int, timeout_s: float) -> AsyncIterator[None]:
        """Hold one slot for the body; wait fairly for it; QueueTimeout after `timeout_s` of waiting."""
        if weight <= 0:
            raise ValueError("weight must be positive")
        await self._acquire(tenant, max(1, cost_tokens) / weight, timeout_s)
        try:
            yield
        finally:
            self._release(tenant)

    async def _acquire(self, tenant: str, cost: float, timeout_s: float) -> None:
        if self._busy < self.capacity and not self._queues:
            self._start(tenant, cost)
            return
        waiter = _Waiter(asyncio.get_running_loop().create_future(), cost, next(self._seq))
        if tenant in self._queues:
            self._queues[tenant].append(waiter)
        else:
            self._queues[tenant] = deque([waiter])
            self._file(tenant)
        try:
            async with asyncio.timeout(timeout_s):
                await waiter.future
        except (TimeoutError, asyncio.CancelledError) as exc:
            if waiter.future.done() and not waiter.future.cancelled():
                self._release(tenant)  # the slot was given as the wait ended: hand it on
            else:
                self._forget(tenant, waiter)
            if isinstance(exc, TimeoutError):
                raise QueueTimeout(f"no slot within {timeout_s:g} s") from None
            raise

    def _forget(self, tenant: str, waiter: _Waiter) -> None:
        queue = self._queues.get(tenant)
        if queue is not None and waiter in queue:
            head = queue[0] is waiter
            queue.remove(waiter)
            if not queue:
                del self._queues[tenant]
                del self._filed[tenant]
            elif head:
                self._file(tenant)

    def _file(self, tenant: str) -> None:
        """File a waiting tenant under its start tag as it is now (its F, its first waiter): O(log tenants)."""
        finish, seq = self._finish.get(tenant, 0.0), self._queues[tenant][0].seq
        self._filed[tenant] = (finish, seq)
        if finish > self._vtime:
            heapq.heappush(self._later, (finish, seq, tenant))
        else:
            heapq.heappush(self._due, (seq, tenant))
        if len(self._due) + len(self._later) > 2 * len(self._filed) + 64:  # mostly stale: rebuild
            self._due = [(seq, t) for t, (f, seq) in self._filed.items() if f <= self._vtime]
            self._later = [(f, seq, t) for t, (f, seq) in self._filed.items() if f > self._vtime]
            heapq.heapify(self._due)
            heapq.heapify(self._later)

    def _next(self) -> str:
        """The waiting tenant whose first waiter has the smallest start tag max(V, F) (ties: the earlier arrival): one
        whose F is at most V first (its tag is V), else the smallest F."""
        while self._later and self._later[0][0] <= self._vtime:  # V passed their F: their start tag is V now
            finish, seq, tenant = heapq.heappop(self._later)
            if self._filed.get(tenant) == (finish, seq):
                heapq.heappush(self._due, (seq, tenant))
        while self._due:
            seq, tenant = self._due[0]
            filed = self._filed.get(tenant)
            if filed is not None and filed[1] == seq and filed[0] <= self._vtime:
                return tenant
            heapq.heappop(self._due)
        while True:  # every waiting tenant is filed in one heap or the other
            finish, seq, tenant = self._later[0]
            if self._filed.get(tenant) == (finish, seq):
                return tenant
            heapq.heappop(self._later)

    def _start(self, tenant: str, cost: float) -> None:
        start = max(self._vtime, self._finish.get(tenant, 0.0))
        self._finish[tenant] = start + cost
        if start > self._vtime:
            self._vtime = start
            if len(self._finish) > 2 * (len(self._filed) + len(self._running)) + 64:
                self._finish = {t: f for t, f in self._finish.items() if f > start}  # the rest count as none
        self._busy += 1
        self._running[tenant] = self._running.get(tenant, 0) + 1

    def _release(self, tenant: str) -> None:
        self._busy -= 1
        self._running[tenant] -= 1
        if not self._running[tenant]:
            del self._running[tenant]
        self._dispatch()

    def _dispatch(self) -> None:
        while self._busy < self.capacity and self._queues:
            tenant = self._next()
            queue = self._queues[tenant]
            waiter = queue.popleft()
            given = not waiter.future.done()  # done: cancelled, its task not yet resumed to forget it
            if given:
                self._start(tenant, waiter.cost)
                waiter.future.set_result(None)
            if queue:
                self._file(tenant)  # its next waiter, under its new F
            else:
                del self._queues[tenant]
                del self._filed[tenant]
