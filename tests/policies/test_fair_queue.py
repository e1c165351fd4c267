"""FairQueue: who starts when slots free, under floods, weights, token costs, timeouts and cancellation.

Requests hold their slot until the test finishes them (oldest first), so the order of starts is exact.
"""

from __future__ import annotations

import asyncio
from collections import deque

import pytest

from policies.limits import FairQueue, QueueTimeout

pytestmark = pytest.mark.anyio


async def _turns() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


class Load:
    """Requests against one queue; records the order in which they start."""

    def __init__(self, capacity: int) -> None:
        self.queue = FairQueue(capacity)
        self.started: list[str] = []
        self._running: deque[asyncio.Event] = deque()
        self.tasks: dict[str, asyncio.Task] = {}

    async def submit(
        self, tenant: str, count: int, *, weight: float = 1.0, cost: int = 100, timeout_s: float = 60.0
    ) -> None:
        for _ in range(count):
            name = f"{tenant}{sum(n.startswith(tenant) for n in self.tasks)}"
            self.tasks[name] = asyncio.create_task(self._request(name, tenant, weight, cost, timeout_s))
        await _turns()

    async def _request(self, name: str, tenant: str, weight: float, cost: int, timeout_s: float) -> None:
        async with self.queue.slot(tenant, weight, cost, timeout_s):
            self.started.append(name)
            done = asyncio.Event()
            self._running.append(done)
            await done.wait()

    async def finish(self, count: int = 1) -> None:
        for _ in range(count):
            self._running.popleft().set()
            await _turns()

    def tenants_started(self, skip: int) -> str:
        return "".join(name[0] for name in self.started[skip:])


async def test_a_tenant_arriving_during_a_flood_starts_at_the_next_free_slot():
    load = Load(capacity=2)
    await load.submit("a", 20)
    await load.submit("b", 3)
    assert load.started == ["a0", "a1"]
    assert load.queue.waiting == {"a": 18, "b": 3} and load.queue.running == {"a": 2}
    await load.finish(6)
    # The bound: B's first request starts at the first slot that frees after it arrived, then B and A alternate
    # (equal weights and costs) until B's queue is empty.
    assert load.started[2:] == ["b0", "a2", "b1", "a3", "b2", "a4"]
    assert load.queue.waiting == {"a": 15} and load.queue.running == {"a": 1, "b": 1}


@pytest.mark.parametrize(
    ("a", "b", "starts", "round_", "per_round"),
    [
        pytest.param({"weight": 3.0}, {"weight": 1.0}, 32, 4, {"a": 3, "b": 1}, id="weights 3:1"),
        pytest.param({"cost": 1000}, {"cost": 100}, 22, 11, {"a": 1, "b": 10}, id="tokens not requests"),
    ],
)
async def test_service_is_shared_in_proportion_in_every_round(a, b, starts, round_, per_round):
    load = Load(capacity=1)
    await load.submit("x", 1)  # holds the slot while both queues fill
    await load.submit("a", 40, **a)
    await load.submit("b", 40, **b)
    await load.finish(starts)
    shares = load.tenants_started(skip=1)
    assert len(shares) == starts
    for i in range(0, starts, round_):  # in every round, not in bursts
        assert {t: shares[i : i + round_].count(t) for t in "ab"} == per_round


async def test_a_tenant_runs_its_requests_in_arrival_order():
    load = Load(capacity=1)
    await load.submit("x", 1)
    await load.submit("a", 3, cost=500)
    await load.submit("a", 3, cost=1)
    await load.finish(6)
    assert load.started[1:] == ["a0", "a1", "a2", "a3", "a4", "a5"]


async def test_a_wait_times_out():
    load = Load(capacity=1)
    await load.submit("x", 1)
    with pytest.raises(QueueTimeout):
        async with load.queue.slot("b", 1.0, 10, timeout_s=0.01):
            pytest.fail("no slot was free")
    assert load.queue.waiting == {} and load.queue.running == {"x": 1}
    await load.finish()
    assert load.queue.running == {}
    async with load.queue.slot("b", 1.0, 10, timeout_s=0.01):  # the timed-out wait left no claim on the slot
        assert load.queue.running == {"b": 1}


async def test_a_cancelled_wait_leaves_no_trace():
    load = Load(capacity=1)
    await load.submit("a", 10)
    await load.submit("b", 1, cost=10**9)  # would put B far behind A in virtual time if it were charged
    load.tasks["b0"].cancel()
    await _turns()
    assert load.queue.waiting == {"a": 9}
    await load.submit("b", 1)
    await load.finish()
    assert load.started == ["a0", "b1"]


async def test_a_slot_given_as_its_waiter_is_cancelled_goes_to_the_next():
    queue = FairQueue(1)
    order: list[str] = []

    async def request(name: str) -> None:
        async with queue.slot(name, 1.0, 10, 60.0):
            order.append(name)

    async with queue.slot("holder", 1.0, 10, 60.0):
        granted_then_cancelled = asyncio.create_task(request("w"))
        nxt = asyncio.create_task(request("x"))
        await _turns()
    granted_then_cancelled.cancel()  # its future already holds the slot; the task has not resumed
    await asyncio.gather(granted_then_cancelled, nxt, return_exceptions=True)
    assert order == ["x"] and queue.running == {} and queue.waiting == {}


class Spec:
    """Start-time fair queuing as the FairQueue's docstring states it, looking at every waiting tenant for each slot."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.vtime, self.seq = capacity, 0.0, 0
        self.finish_tags: dict[str, float] = {}
        self.waiting: dict[str, deque[tuple[str, float, int]]] = {}
        self.running: deque[str] = deque()
        self.started: list[str] = []

    def submit(self, name: str, tenant: str, cost: float) -> None:
        if len(self.running) < self.capacity and not self.waiting:
            self._start(name, tenant, cost)
            return
        self.seq += 1
        self.waiting.setdefault(tenant, deque()).append((name, cost, self.seq))

    def cancel(self, name: str) -> None:
        for tenant, queue in list(self.waiting.items()):
            self.waiting[tenant] = deque(w for w in queue if w[0] != name)
            if not self.waiting[tenant]:
                del self.waiting[tenant]

    def finish(self) -> None:
        self.running.popleft()
        while len(self.running) < self.capacity and self.waiting:
            tenant = min(
                self.waiting, key=lambda t: (max(self.vtime, self.finish_tags.get(t, 0.0)), self.waiting[t][0][2])
            )
            name, cost, _ = self.waiting[tenant].popleft()
            if not self.waiting[tenant]:
                del self.waiting[tenant]
            self._start(name, tenant, cost)

    def _start(self, name: str, tenant: str, cost: float) -> None:
        start = max(self.vtime, self.finish_tags.get(tenant, 0.0))
        self.finish_tags[tenant], self.vtime = start + cost, start
        self.running.append(name)
        self.started.append(name)


@pytest.mark.parametrize("seed", range(4))
async def test_starts_follow_the_fair_queuing_rule_under_random_arrivals_cancels_and_ends(seed):
    import random

    rng = random.Random(seed)
    load, spec = Load(capacity=3), Spec(3)
    for _ in range(150):
        action = rng.random()
        if action < 0.5:
            tenant, weight, cost = rng.choice("abcdefg"), rng.choice((1.0, 4.0)), rng.choice((1, 50, 400))
            await load.submit(tenant, 1, weight=weight, cost=cost)
            spec.submit(list(load.tasks)[-1], tenant, cost / weight)
        elif action < 0.6 and spec.waiting:
            name = rng.choice([w[0] for queue in spec.waiting.values() for w in queue])
            load.tasks[name].cancel()
            await _turns()
            spec.cancel(name)
        elif spec.running:
            await load.finish()
            spec.finish()
        assert load.started == spec.started
    assert load.queue.waiting == {t: len(q) for t, q in spec.waiting.items()}


async def test_a_free_slot_goes_to_the_next_tenant_without_looking_at_every_waiting_one(monkeypatch):
    """With thousands of tenants waiting, giving a slot must not read every tenant's first waiter (that was
    quadratic: 10,000 tenants waiting at once took over a minute of CPU to start)."""
    from policies.limits import fair_queue

    reads = 0

    class CountedWaiter(fair_queue._Waiter):
        @property
        def seq(self) -> int:
            nonlocal reads
            reads += 1
            return self._seq

        @seq.setter
        def seq(self, value: int) -> None:
            self._seq = value

    monkeypatch.setattr(fair_queue, "_Waiter", CountedWaiter)
    tenants = 300
    load = Load(capacity=1)
    await load.submit("holder", 1)
    for i in range(tenants):
        await load.submit(f"t{i}-", 1)
    await load.finish(tenants)
    assert len(load.started) == tenants + 1
    assert reads <= 4 * tenants
