"""Redis restarted without its data: a replica re-registers its open admissions before its next call for their
tenant runs, so concurrency limits stay exact and the open admissions' settlements still apply (once, never
negative)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest

from policies.limits import Limits, RedisLimiter
from tests.policies.test_redis_reconnects import counted

pytestmark = pytest.mark.anyio


def restart(server) -> None:
    """Kill redis-server and start it again on its port: every key is gone (no persistence)."""
    server.kill()
    server.start()


async def test_two_open_streams_still_hold_their_slots_after_a_restart(own_redis_server):
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limiter = RedisLimiter(own_redis_server.url)
    limits = Limits(concurrent_requests=2, tokens_per_day=10**6)
    streams = [await limiter.admit(tenant, limits, f"s{i}", 100) for i in range(2)]
    assert all(s.allowed for s in streams)
    restart(own_redis_server)
    for i in (3, 4):  # both admitted before: four ran at once
        refused = await limiter.admit(tenant, limits, f"n{i}", 100)
        assert not refused.allowed and refused.limit == "concurrent_requests" and not refused.store_error
    assert limiter.restores == 1
    assert await counted(own_redis_server.url, tenant) == {"requests": 0, "tokens": 0, "slots": 2, "day": 200}
    await limiter.settle(streams[0], 30)  # did nothing before: the slot and its tokens were gone
    assert await counted(own_redis_server.url, tenant) == {"requests": 0, "tokens": 0, "slots": 1, "day": 130}
    third = await limiter.admit(tenant, limits, "n5", 100)
    assert third.allowed
    for admission, used in ((streams[1], 40), (third, 50)):
        await limiter.settle(admission, used)
    assert await counted(own_redis_server.url, tenant) == {"requests": 1, "tokens": 50, "slots": 0, "day": 120}
    assert limiter.store_errors == 0
    await limiter.close()


async def test_a_settlement_that_first_meets_the_restart_applies_once_and_never_goes_negative(own_redis_server):
    """Another request admitted after the restart (by another replica) is not undercounted by the open one's
    settlement, which used to subtract its unused reservation from the new day counter."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    replica, other = RedisLimiter(own_redis_server.url), RedisLimiter(own_redis_server.url)
    limits = Limits(concurrent_requests=5, tokens_per_day=10**6)
    stream = await replica.admit(tenant, limits, "s", 1000)
    restart(own_redis_server)
    fresh = await other.admit(tenant, limits, "f", 100)  # `other` holds nothing open: it notices nothing
    assert fresh.allowed
    await replica.settle(stream, 10)
    await replica.settle(stream, 10)  # settling twice is still a no-op
    assert await counted(own_redis_server.url, tenant) == {"requests": 1, "tokens": 100, "slots": 1, "day": 110}
    assert (replica.restores, other.restores) == (1, 0)
    await other.settle(fresh, 0, void=True)
    assert await counted(own_redis_server.url, tenant) == {"requests": 0, "tokens": 0, "slots": 0, "day": 10}
    for limiter in (replica, other):
        await limiter.close()


async def test_a_models_slots_are_restored_with_the_tenants(own_redis_server):
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limiter = RedisLimiter(own_redis_server.url)
    tenant_limits, model_limits = Limits(concurrent_requests=10), Limits(concurrent_requests=1)
    stream = await limiter.admit(tenant, tenant_limits, "s", 10, model="m", model_limits=model_limits)
    restart(own_redis_server)
    refused = await limiter.admit(tenant, tenant_limits, "n", 10, model="m", model_limits=model_limits)
    assert not refused.allowed and refused.scope == "model" and refused.limit == "concurrent_requests"
    await limiter.settle(stream, 10)
    assert (await limiter.admit(tenant, tenant_limits, "n2", 10, model="m", model_limits=model_limits)).allowed
    await limiter.close()


async def until(done: Callable[[], bool]) -> None:
    """Wait for `done()`, polled, 30 s at most (a bound, not a measure)."""
    async with asyncio.timeout(30):
        while not done():
            await asyncio.sleep(0.01)


async def test_another_replica_counts_the_open_streams_once_their_replica_checked_for_a_restart(own_redis_server):
    """Replica B holds nothing open for the tenant, so its own calls cannot notice the restart: A's periodic
    run_id check re-registers A's streams, and B is refused from then on."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    a, b = RedisLimiter(own_redis_server.url), RedisLimiter(own_redis_server.url)
    a.restart_check_s = 0.02
    limits = Limits(concurrent_requests=2)
    streams = [await a.admit(tenant, limits, f"s{i}", 10) for i in range(2)]
    watcher = asyncio.create_task(a._watch_restarts())
    try:
        await until(lambda: a.run_id is not None)
        restart(own_redis_server)
        await until(lambda: a.restores == 1)
    finally:
        watcher.cancel()
    refused = await b.admit(tenant, limits, "n", 10)
    assert not refused.allowed and refused.limit == "concurrent_requests"
    for stream in streams:
        await a.settle(stream, 7)
    assert await counted(own_redis_server.url, tenant) == {"requests": 0, "tokens": 0, "slots": 0, "day": 14}
    assert (await b.admit(tenant, limits, "n2", 10)).allowed
    for limiter in (a, b):
        await limiter.close()


async def test_a_restore_that_arrives_after_the_settlement_brings_no_slot_back(own_redis_server):
    """The watcher's restore sent while the admission's settle was in flight: Redis ran the settle first."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limiter = RedisLimiter(own_redis_server.url)
    stream = await limiter.admit(tenant, Limits(concurrent_requests=1), "s", 10)
    stale = dict(limiter._open[tenant])  # what the watcher read before the settle's answer came back
    restart(own_redis_server)
    await limiter.settle(stream, 4)
    limiter._open[tenant] = stale
    await limiter._restore(tenant)
    assert await counted(own_redis_server.url, tenant) == {"requests": 0, "tokens": 0, "slots": 0, "day": 4}
    await limiter.close()
