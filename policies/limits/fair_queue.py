"""FairQueue: fair admission to one model's backend capacity across tenants (start-time fair queuing)."""

from __future__ import annotations

import asyncio
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
        self._vtime = 0.0
        self._seq = itertools.count()

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
        self._queues.setdefault(tenant, deque()).append(waiter)
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
            queue.remove(waiter)
            if not queue:
                del self._queues[tenant]

    def _start(self, tenant: str, cost: float) -> None:
        start = max(self._vtime, self._finish.get(tenant, 0.0))
        self._finish[tenant] = start + cost
        self._vtime = start
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
            tenant = min(
                self._queues,
                key=lambda t: (max(self._vtime, self._finish.get(t, 0.0)), self._queues[t][0].seq),
            )
            queue = self._queues[tenant]
            waiter = queue.popleft()
            if not queue:
                del self._queues[tenant]
            if waiter.future.done():  # cancelled, its task not yet resumed to forget it
                continue
            self._start(tenant, waiter.cost)
            waiter.future.set_result(None)
