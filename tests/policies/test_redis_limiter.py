"""What only the Redis store has: replicas in separate processes, the server's clock, a server that dies."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis as sync_redis
import redis.asyncio as redis
from redis.exceptions import TimeoutError as RedisTimeoutError

from policies.limits import Limits, RedisLimiter
from policies.limits.redis_calls import CALLS_AT_ONCE, BoundedRedis
from policies.limits.redis_scripts import CLEAN_PER_CALL, MARK_MS
from tests.faults.tcp_proxy import TcpFaultProxy

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


def test_two_replicas_admit_exactly_20_of_50(redis_server):
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    replicas = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.policies.admit_worker", redis_server.url, tenant, "25", "20"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for replica in replicas:
            assert replica.stdout.readline().strip() == "ready"
        sync_redis.Redis.from_url(redis_server.url).set(f"go:{tenant}", 1)
        counts = [int(replica.stdout.readline()) for replica in replicas]
    finally:
        for replica in replicas:
            replica.wait(timeout=60)
    assert sum(counts) == 20  # each replica alone would admit 20 of its 25: a per-replica count gives 40


async def test_the_server_clock_counts(redis_server):
    limiter = RedisLimiter(redis_server.url)  # no test clock: the scripts read TIME
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limits = Limits(requests_per_minute=1)
    assert (await limiter.admit(tenant, limits, "a", 1)).allowed
    refused = await limiter.admit(tenant, limits, "b", 1)
    assert refused.limit == "requests_per_minute" and 59 < refused.retry_after_s <= 60
    await limiter.close()


async def test_every_key_expires_by_itself(redis_server):
    limiter = RedisLimiter(redis_server.url, prefix="ttl-test")
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    admission = await limiter.admit(tenant, Limits(tokens_per_day=10**6), "c", 10)
    client = redis.Redis.from_url(redis_server.url)

    async def ttls() -> list[int]:  # the marks' sets aside (the settle's may be the next 10 s's)
        keys = [k for k in await client.keys(f"ttl-test:{{{tenant}}}:*") if b":m:" not in k]
        return [await client.pttl(key) for key in keys]

    async def mark_ttls() -> list[int]:
        return [await client.pttl(key) for key in await client.keys(f"ttl-test:{{{tenant}}}:m:*")]

    assert len(await ttls()) == 8 and min(await ttls()) > 0  # window (4), slots, charge, day, the replica's marker
    assert len(await mark_ttls()) == 1 and min(await mark_ttls()) > 0  # the holder's mark
    await limiter.settle(admission, 5)
    assert len(await ttls()) == 6 and min(await ttls()) > 0  # the charge and the emptied slots set are gone
    assert len(await mark_ttls()) in (1, 2) and min(await mark_ttls()) > 0
    await client.aclose()
    await limiter.close()


async def test_marks_are_a_set_per_ten_seconds_not_a_key_per_admission_and_still_stop_every_rerun(redis_server):
    """Each admit and settle marks its holder for MARK_MS at least (a rerun of the script, or an admit that arrives
    after its own settle, reserves nothing); 40 admissions in one 10 s leave one mark set, not 40 keys."""
    now = [1_000_000_000.0]
    limiter = RedisLimiter(redis_server.url, prefix="mark-test", clock=lambda: now[0])
    tenant, limits = f"t-{uuid.uuid4().hex[:8]}", Limits(requests_per_minute=1000, concurrent_requests=1000)
    client = redis.Redis.from_url(redis_server.url)
    for i in range(40):
        await limiter.settle(await limiter.admit(tenant, limits, f"c{i}", 10), 10)
    assert len(await client.keys(f"mark-test:{{{tenant}}}:*")) <= 7  # the window's 4, its day, one set of marks
    assert len(await client.keys(f"mark-test:{{{tenant}}}:m:*")) == 1
    slots = f"mark-test:{{{tenant}}}:slots"
    first = await limiter.admit(tenant, limits, "once", 10)
    now[0] += MARK_MS / 1000 - 1  # near the end of the mark's life: its admit run again reserves nothing
    assert (await limiter._admit(tenant, limits, "once", 10, first.holder)).allowed
    assert await client.zrange(slots, 0, -1) == [first.holder.encode()]
    await limiter.settle(first, 10)
    await limiter._settle(tenant, "late", "late-holder", 0, True)  # a settle that came before its admit
    now[0] += MARK_MS / 1000 - 1
    assert (await limiter._admit(tenant, limits, "late", 10, "late-holder")).allowed
    assert await client.zcard(slots) == 0
    await client.aclose()
    await limiter.close()


@pytest.mark.parametrize("on_store_error", ["open", "closed"])
async def test_a_dead_store_applies_the_tenants_choice_and_recovery_is_automatic(own_redis_server, on_store_error):
    limiter = RedisLimiter(own_redis_server.url, timeout_s=0.2)
    limiter.settle_backlog.retry_delays_s = ()  # counted errors stay exact
    limits = Limits(requests_per_minute=2, on_store_error=on_store_error)
    before = await limiter.admit("acme", limits, "a", 1)
    assert before.allowed and limiter.store_healthy
    own_redis_server.kill()
    during = await limiter.admit("acme", limits, "b", 1)
    await limiter.settle(before, 1)  # lost with the server: logged and counted, never raised
    await limiter.settled()  # and the undo of `during`, which the store might have applied before it failed
    assert during.store_error and not limiter.store_healthy and limiter.store_errors == 3
    assert not await limiter.probe_store() and limiter.store_errors == 4
    if on_store_error == "open":
        assert (during.allowed, during.status, during.holder) == (True, 200, "")
    else:
        assert (during.allowed, during.status, during.limit) == (False, 503, "store")
    await limiter.settle(during, 1)  # nothing was reserved: a no-op
    own_redis_server.start()  # empty, without the scripts: NOSCRIPT, reloaded
    assert await limiter.probe_store() and limiter.store_healthy
    after = [await limiter.admit("acme", limits, c, 1) for c in "cde"]
    assert [a.allowed for a in after] == [True, True, False] and limiter.store_healthy
    assert limiter.store_errors == 4


async def test_scripts_flushed_are_reloaded(redis_server):
    limiter = RedisLimiter(redis_server.url)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    await limiter.admit(tenant, Limits(), "a", 1)
    client = redis.Redis.from_url(redis_server.url)
    await client.script_flush()
    assert (await limiter.admit(tenant, Limits(), "b", 1)).allowed and limiter.store_errors == 0
    await client.aclose()
    await limiter.close()


async def test_a_settle_the_store_missed_is_retried(redis_server):
    limiter = RedisLimiter(redis_server.url, timeout_s=0.1)
    limiter.settle_backlog.retry_delays_s = (0.3, 0.3)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limits = Limits(concurrent_requests=1, tokens_per_minute=1000)
    admission = await limiter.admit(tenant, limits, "a", 500)
    client = redis.Redis.from_url(redis_server.url)
    await client.execute_command("CLIENT", "PAUSE", 200, "WRITE")  # scripts that write wait: the settle times out
    await limiter.settle(admission, 100)
    assert limiter.store_errors == 1 and not limiter.store_healthy
    await limiter.close()  # waits for the retries
    assert limiter.store_healthy
    prober = RedisLimiter(redis_server.url)
    probe = await prober.admit(tenant, limits, "b", 0)
    assert probe.allowed and probe.headers["x-ratelimit-remaining-tokens"] == "900"
    await prober.close()
    await client.aclose()


async def test_a_dead_replicas_slots_expire_with_their_lease(redis_server):
    now = [time.time()]
    limiter = RedisLimiter(redis_server.url, lease_s=30, clock=lambda: now[0])
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limits = Limits(concurrent_requests=1)
    assert (await limiter.admit(tenant, limits, "a", 1)).allowed  # never settled: its replica died
    assert not (await limiter.admit(tenant, limits, "b", 1)).allowed
    now[0] += 30
    assert (await limiter.admit(tenant, limits, "b", 1)).allowed
    await limiter.close()


async def test_an_admit_cancelled_while_redis_answers_leaves_no_trace(redis_server):
    limiter = RedisLimiter(redis_server.url, timeout_s=2.0)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limits = Limits(requests_per_minute=10, concurrent_requests=1, tokens_per_minute=1000)
    client = redis.Redis.from_url(redis_server.url)
    await client.execute_command("CLIENT", "PAUSE", 100, "WRITE")  # the script waits in Redis; the caller leaves
    admitting = asyncio.create_task(limiter.admit(tenant, limits, "a", 500))
    await asyncio.sleep(0.02)
    admitting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await admitting
    await limiter.close()  # waits for the script, run after the pause, and for its reservation to be taken back
    prober = RedisLimiter(redis_server.url)
    probe = await prober.admit(tenant, limits, "b", 0)
    assert probe.allowed and probe.headers["x-ratelimit-remaining-tokens"] == "1000"
    assert probe.headers["x-ratelimit-remaining-requests"] == "9"
    await prober.close()
    await client.aclose()


@pytest.mark.parametrize("on_store_error", ["open", "closed"])
async def test_an_admit_whose_answer_never_came_is_undone_once_the_store_answers(redis_server, on_store_error):
    """Redis runs the admit but its answer is held (a stall): the tenant's choice applies, and the reservation
    Redis made anyway is released once Redis answers again (it held a concurrency slot for its whole lease)."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limits = Limits(
        requests_per_minute=10, concurrent_requests=1, tokens_per_minute=1000, on_store_error=on_store_error
    )
    with TcpFaultProxy(redis_server.port) as proxy:
        limiter = RedisLimiter(proxy.url_for("redis"), timeout_s=0.2)
        limiter.settle_backlog.retry_delays_s = (0.3, 1.0)
        assert await limiter.probe_store()  # connected: the admit's script itself goes through and runs
        proxy.set("stall")
        stalled = await limiter.admit(tenant, limits, "a", 500)
        assert stalled.store_error and stalled.allowed == (on_store_error == "open")
        proxy.set("pass")
        await limiter.settled()
        probe = await limiter.admit(tenant, limits, "b", 0)
        assert probe.allowed and probe.headers["x-ratelimit-remaining-tokens"] == "1000"
        assert probe.headers["x-ratelimit-remaining-requests"] == "9"  # the probe's own: the stalled one left no trace
        await limiter.close()


async def test_fifty_parallel_admits_against_a_slow_redis_admit_exactly_20(redis_server):
    """Every Redis reply 200 ms late (each admit on a connection of its own): no admit lost or counted twice."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    with TcpFaultProxy(redis_server.port) as proxy:
        limiter = RedisLimiter(proxy.url_for("redis"), timeout_s=2.0)  # late, never timed out: the count is the point
        proxy.set("delay", delay_s=0.2)
        verdicts = await asyncio.gather(
            *(limiter.admit(tenant, Limits(requests_per_minute=20), f"c{i}", 1) for i in range(50))
        )
        assert sum(v.allowed for v in verdicts) == 20 and limiter.store_errors == 0
        assert {v.limit for v in verdicts if not v.allowed} == {"requests_per_minute"}
        await limiter.close()


async def test_a_settle_lost_in_an_outage_longer_than_the_retries_lands_once_redis_answers(redis_server):
    """Redis unreachable (what the limiter sends is lost) for longer than the first retries: the settlement is tried
    again once Redis answers, instead of holding the tenant's concurrency slot for its whole lease; `close()` during an
    outage still returns."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limits = Limits(concurrent_requests=1, tokens_per_minute=1000)
    with TcpFaultProxy(redis_server.port) as proxy:
        limiter = RedisLimiter(proxy.url_for("redis"), timeout_s=0.1)
        limiter.settle_backlog.retry_delays_s = (0.05,)
        admission = await limiter.admit(tenant, limits, "a", 500)
        proxy.set("blackhole")
        await limiter.settle(admission, 100)
        while limiter.store_errors < 2:  # the first try and its one quick retry: both lost
            await asyncio.sleep(0.01)
        # the slot is still held (asked past the proxy: the limiter's own later tries run on a doubling timer too, and
        # one could land before a probe through it once the proxy passed, as on a loaded host)
        direct = RedisLimiter(redis_server.url)
        assert (await direct.admit(tenant, limits, "probe", 0)).limit == "concurrent_requests"
        await direct.close()
        proxy.set("pass")
        assert await limiter.probe_store()  # the store answers: the settlement waiting for that goes now
        await asyncio.wait_for(limiter.settled(), 30)  # a hang fails here instead of stalling the suite
        probe = await limiter.admit(tenant, limits, "b", 0)
        assert probe.allowed and probe.headers["x-ratelimit-remaining-tokens"] == "900"
        proxy.set("blackhole")
        await limiter.settle(probe, 0)
        await asyncio.wait_for(limiter.close(), 30)


async def test_a_burst_past_the_connection_pool_waits_its_turn_instead_of_failing(redis_server):
    """More admits at once than the pool has connections (redis-py refuses a call past them): each waits for a
    connection; none is a store error (a 503 for a tenant that fails closed) while Redis answers."""
    limiter = RedisLimiter(redis_server.url, timeout_s=5.0)  # 64 connects at once on a loaded host
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    verdicts = await asyncio.gather(*(limiter.admit(tenant, Limits(), f"c{i}", 1) for i in range(300)))
    assert all(v.allowed for v in verdicts) and limiter.store_errors == 0
    await asyncio.gather(*(limiter.settle(v, 1) for v in verdicts))
    assert limiter.store_errors == 0
    await limiter.close()


async def test_a_queue_longer_than_the_timeout_waits_while_redis_keeps_answering(redis_server):
    """Turns are waited for while the calls ahead are answered: 5 rounds of 64 slow calls outlast timeout_s (the last
    round waits 4 holds, 1.2 timeouts), and none fails; the wait is bounded by answers, not by the queue's length.
    timeout_s is 1 s, not less: it is also redis-py's connect and read timeout, and 64 connects at once on a loaded
    host took longer than 0.1 s."""
    timeout_s = 1.0
    calls = BoundedRedis(redis_server.url, timeout_s=timeout_s)

    async def slow_call() -> None:
        async with calls.turn() as client:
            await client.ping()
            await asyncio.sleep(0.3 * timeout_s)

    await asyncio.gather(*(slow_call() for _ in range(5 * CALLS_AT_ONCE)))
    await calls.client.aclose()


async def test_a_turn_fails_once_no_call_is_answered_for_the_timeout(redis_server):
    """CALLS_AT_ONCE calls that never end (a stalled store): the next call fails after timeout_s, not never."""
    calls, stalled = BoundedRedis(redis_server.url, timeout_s=0.1), asyncio.Event()

    async def hung_call() -> None:
        async with calls.turn():
            await stalled.wait()

    holders = [asyncio.create_task(hung_call()) for _ in range(CALLS_AT_ONCE)]
    await asyncio.sleep(0)
    with pytest.raises(RedisTimeoutError):
        async with asyncio.timeout(5):
            async with calls.turn():
                pass
    stalled.set()
    await asyncio.gather(*holders)
    await calls.client.aclose()


async def test_a_burst_that_left_the_window_is_taken_out_a_bounded_slice_per_call_and_counts_stay_exact(redis_server):
    """One script freed every aged-out entry of a window at once: after a burst, the next call's work (and Redis's
    stall, for every tenant) grew with the burst. A call now takes CLEAN_PER_CALL of them out at most, and the counts
    leave by time (more than AGED_ENTRIES at once: by the sums of their milliseconds and seconds), so they are exact
    while the rest waits for later calls; a window all of whose entries left goes at once."""
    t0 = 1_000_000_000.0
    now = [t0]
    limiter = RedisLimiter(redis_server.url, prefix="burst-test", clock=lambda: now[0], timeout_s=30)  # a busy host
    tenant, limits = f"t-{uuid.uuid4().hex[:8]}", Limits(requests_per_minute=10_000, tokens_per_minute=10**6)
    client = redis.Redis.from_url(redis_server.url)
    window = f"burst-test:{{{tenant}}}:w2"

    async def one(i: int) -> None:  # reserves 7, uses 5; two of every 50 served nothing (taken back)
        await limiter.settle(await limiter.admit(tenant, limits, f"b{i}", 7), 5, void=i % 25 == 0)

    for group in range(12):  # 50 admissions every 10 ms
        now[0] = t0 + group / 100
        await asyncio.gather(*(one(group * 50 + i) for i in range(50)))
    now[0] = t0 + 30
    await limiter.admit(tenant, limits, "kept", 11)  # still in the window when the burst has left it
    for call, (at, left_in_burst) in enumerate([(60.105, 48), (60.3, 0)], start=1):
        now[0] = t0 + at  # first the 11 groups up to 100 ms leave (528 admissions: by sums), then the last one
        admission = await limiter.admit(tenant, limits, f"after{call}", 3)
        assert admission.headers["x-ratelimit-remaining-requests"] == str(10_000 - left_in_burst - 1 - call)
        assert admission.headers["x-ratelimit-remaining-tokens"] == str(10**6 - 5 * left_in_burst - 11 - 3 * call)
        assert await client.zcard(window) == 12 * 48 - call * CLEAN_PER_CALL + 1 + call  # the voided ones left
    now[0] += 61  # all of it left: the keys go at once (UNLINK frees a large one aside)
    assert (await limiter.admit(tenant, limits, "alone", 3)).headers["x-ratelimit-remaining-requests"] == "9999"
    assert await client.zcard(window) == 1
    await client.aclose()
    await limiter.close()


async def test_a_busy_windows_sums_hold_only_what_is_in_it(redis_server):
    """The per-ms and per-second sums of admissions that left, or were voided, are taken out: a tenant always busy
    keeps its keys alive, so anything left behind would pile up for as long as it stays busy."""
    now = [1_000_000_000.0]
    limiter = RedisLimiter(redis_server.url, prefix="sums-test", clock=lambda: now[0])
    tenant, limits = f"t-{uuid.uuid4().hex[:8]}", Limits(requests_per_minute=1000, tokens_per_minute=10**6)
    client = redis.Redis.from_url(redis_server.url)
    for i in range(300):  # 3.5 minutes, one in three served nothing
        await limiter.settle(await limiter.admit(tenant, limits, f"c{i}", 7), 5, void=i % 3 == 0)
        now[0] += 0.7
    entries = await client.zcard(f"sums-test:{{{tenant}}}:w2")
    assert entries <= 60 / 0.7 * 2 / 3 + 1  # the window's own
    assert await client.hlen(f"sums-test:{{{tenant}}}:wb2") <= 2 * entries + 2 * 61  # their ms and seconds
    await client.aclose()
    await limiter.close()
