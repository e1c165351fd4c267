"""Calls to Redis whose connection breaks are sent again, and never count twice: the server's idle close racing a
call, an answer lost after the script ran (a fault proxy), a `CLIENT KILL` storm around a burst of admits; an answer
corrupted on its way back is a store error, never a crash, and what its call reserved is taken back."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest
import redis.asyncio as redis

from gateway.api.response_store import RedisStore
from gateway.errors import APIError
from policies.limits import Limits, RedisLimiter
from tests.faults.tcp_proxy import TcpFaultProxy

pytestmark = pytest.mark.anyio

LIMITS = Limits(requests_per_minute=100, tokens_per_minute=100_000, concurrent_requests=100, tokens_per_day=10**6)


async def counted(url: str, tenant: str) -> dict[str, int]:
    """What Redis holds for `tenant` (default prefix): requests, tokens, slots and tokens today in the window."""
    client = redis.Redis.from_url(url)
    base = f"gw:limits:{{{tenant}}}"
    try:
        requests, tokens = await client.hmget(f"{base}:ws2", "r", "t")
        days = [int(await client.get(key)) async for key in client.scan_iter(f"{base}:d:*")]
        return {
            "requests": int(requests or 0),
            "tokens": int(tokens or 0),
            "slots": await client.zcard(f"{base}:slots"),
            "day": sum(days),
        }
    finally:
        await client.aclose()


@pytest.fixture
def link(redis_server):
    with TcpFaultProxy(redis_server.port) as proxy:
        yield proxy


async def test_a_pooled_connection_the_server_closed_as_a_call_went_out_is_no_store_error(redis_server, link):
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limiter = RedisLimiter(link.url_for("redis"))
    assert await limiter.probe_store()
    link.stale()  # the pooled connection closes at the admit's bytes, which never reach Redis
    admission = await limiter.admit(tenant, LIMITS, "a", 10)
    assert admission.allowed and not admission.store_error and link.stale_hits == 1
    assert await counted(redis_server.url, tenant) == {"requests": 1, "tokens": 10, "slots": 1, "day": 10}
    await limiter.close()


@pytest.mark.parametrize("lost", [1, 2])
async def test_an_admit_whose_answer_was_lost_after_it_ran_counts_once(redis_server, link, lost):
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limiter = RedisLimiter(link.url_for("redis"))
    assert await limiter.probe_store()
    link.lose_answers(lost)  # the script runs in Redis, its answer is lost, and so is the rerun's when lost == 2
    admission = await limiter.admit(tenant, LIMITS, "a", 10)
    assert admission.allowed and not admission.store_error
    assert await counted(redis_server.url, tenant) == {"requests": 1, "tokens": 10, "slots": 1, "day": 10}
    link.lose_answers(1)  # the settle's too
    await limiter.settle(admission, 7)
    assert await counted(redis_server.url, tenant) == {"requests": 1, "tokens": 7, "slots": 0, "day": 7}
    assert limiter.store_errors == 0
    await limiter.close()


async def test_an_admit_that_runs_after_its_own_settle_reserves_nothing(redis_server):
    """The order a lost answer can leave: the admit given up for lost (its void settle sent), then run by Redis."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limiter = RedisLimiter(redis_server.url)
    await limiter._settle(tenant, "a", "late", 0, True)
    assert (await limiter._admit(tenant, LIMITS, "a", 10, "late")).allowed  # nobody waits for this answer
    assert await counted(redis_server.url, tenant) == {"requests": 0, "tokens": 0, "slots": 0, "day": 0}
    await limiter.close()


async def test_a_refused_admit_sent_again_decides_afresh(redis_server):
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limiter = RedisLimiter(redis_server.url)
    limits = Limits(concurrent_requests=1)
    first = await limiter.admit(tenant, limits, "a", 1)
    assert not (await limiter._admit(tenant, limits, "b", 1, "again")).allowed
    await limiter.settle(first, 1)
    assert (await limiter._admit(tenant, limits, "b", 1, "again")).allowed
    await limiter.close()


async def test_a_client_kill_storm_around_a_burst_of_admits_keeps_the_counts_exact(redis_server):
    """Every connection of the limiter killed again and again while 6 clients make 10 admits each and settle them:
    each admit
    counted once (a rerun of one that ran reserves nothing), each settle applied once, no slot left taken."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limiter = RedisLimiter(redis_server.url)
    limiter.settle_backlog.retry_delays_s = (0.05, 0.1)
    killer = redis.Redis.from_url(redis_server.url)
    killed, calm = 0, asyncio.Event()

    async def kill_until_calm() -> None:
        nonlocal killed
        while not calm.is_set():
            killed += await killer.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            await asyncio.sleep(0.01)

    async def requests(first: int) -> list[int]:
        served = []
        for i in range(first, first + 10):
            admission = await limiter.admit(tenant, LIMITS, f"c{i}", 100)
            if admission.allowed and not admission.store_error:
                await limiter.settle(admission, i)
                served.append(i)
        return served

    storm = asyncio.create_task(kill_until_calm())
    try:
        served = [i for client in await asyncio.gather(*(requests(10 * c) for c in range(6))) for i in client]
    finally:  # the storm ends with its last KILL answered: one cancelled in flight ran later, killing the count below
        calm.set()
        await storm
    await limiter.settled()  # the void settles of admits whose every try broke (their scripts may have run)
    assert killed > 0 and served
    assert await counted(redis_server.url, tenant) == {
        "requests": len(served),
        "tokens": sum(served),
        "slots": 0,
        "day": sum(served),
    }
    await limiter.close()
    await killer.aclose()


@pytest.mark.parametrize("on_store_error", ["closed", "open"])
async def test_an_admit_whose_answer_came_back_corrupted_is_a_store_error_and_reserves_nothing(
    redis_server, link, on_store_error
):
    """The admit script ran, its answer was corrupted from its Nth byte on: redis-py's parser raised ValueError (no
    RedisError: the request's 500, for a tenant failing open too) and its reservation (request, tokens, day and
    the concurrency slot, for the 900 s lease) stayed. Now each is the tenant's store error, taken back once the
    store answers cleanly."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limiter = RedisLimiter(link.url_for("redis"))
    limits = dataclasses.replace(LIMITS, on_store_error=on_store_error)
    assert await limiter.probe_store()
    for after in range(1, 41):  # the admit's answer is longer: every one is cut somewhere inside it
        link.set("corrupt", after=after)
        admission = await limiter.admit(tenant, limits, f"a{after}", 10)
        assert admission.store_error and admission.allowed == (on_store_error == "open"), after
    link.set("pass")
    assert await limiter.probe_store()
    await limiter.settled()
    assert await counted(redis_server.url, tenant) == {"requests": 0, "tokens": 0, "slots": 0, "day": 0}
    await limiter.close()


async def test_the_response_store_reads_through_a_connection_the_server_closed(redis_server, link):
    store = RedisStore(link.url_for("redis"), prefix=f"r-{uuid.uuid4().hex[:8]}:")
    record = {"id": "resp_1", "owner": "acme", "response": {"id": "resp_1"}, "input_items": []}
    await store.put(record)
    link.stale()
    assert await store.get("resp_1", "acme") == record
    link.lose_answers(1, skip=1)  # past the owner check's GET, the DEL ran; its rerun finds nothing to delete
    assert await store.delete("resp_1", "acme")
    assert await store.get("resp_1", "acme") is None
    await store.close()


async def test_a_stored_response_corrupted_on_its_way_back_is_a_503(redis_server, link):
    """A record's bytes corrupted past its length line parse as a bulk string whose JSON did not: a 500 before."""
    store = RedisStore(link.url_for("redis"), prefix=f"r-{uuid.uuid4().hex[:8]}:")
    item = {"id": "msg_1", "type": "message", "role": "user", "content": "hi"}
    record = {"id": "resp_1", "owner": "acme", "response": {"id": "resp_1"}, "input_items": [item]}
    await store.put(record)
    link.set("corrupt", after=12)  # each answer's first 12 bytes, then garbage
    for read in (store.get("resp_1", "acme"), store.get_items(["msg_1"], "acme")):
        with pytest.raises(APIError) as refused:
            await read
        assert refused.value.status == 503
    link.set("pass")
    assert await store.get_items(["msg_1"], "acme") == {"msg_1": item}
    await store.close()
