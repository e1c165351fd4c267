"""Stored Responses: the in-memory store's bounds and owners, the Redis store on a real redis-server,
and two gateways sharing one Redis (a conversation started on one continues on the other)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator

import httpx
import pytest
import redis

from gateway.api.response_store import INDEX_ENTRY_BYTES, MemoryStore, RedisStore
from gateway.api.tenancy import PolicyGate
from gateway.app import create_app
from gateway.errors import APIError
from gateway.models.registry import ModelRegistry
from gateway.observability.whole_lines import WholeLines
from policies.audit import AuditLog
from policies.limits import MemoryLimiter
from policies.limits.redis_calls import CALLS_AT_ONCE
from policies.store import PolicyStore
from tests.faults.tcp_proxy import TcpFaultProxy
from tests.gateway.http_server import serve
from tests.redis_server import RedisServer


def record(rid: str, owner: str | None = None, size: int = 10) -> dict:
    return {"id": rid, "owner": owner, "response": {"id": rid}, "input_items": [], "history": ["x" * size]}


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="module")
def redis_url(redis_server) -> str:
    return f"{redis_server.url}/0"


def test_memory_store_drops_the_oldest_past_its_count():
    store = MemoryStore(max_count=2)
    for rid in ("a", "b", "c"):
        run(store.put(record(rid)))
    assert run(store.get("a", None)) is None and run(store.get("c", None))["id"] == "c" and len(store) == 2


def test_memory_store_bounds_bytes_and_never_keeps_an_oversized_record():
    store = MemoryStore(max_bytes=400)
    run(store.put(record("a", size=150)))
    run(store.put(record("b", size=150)))
    assert run(store.get("a", None)) is None and run(store.get("b", None)) is not None
    assert store.bytes <= 400
    run(store.put(record("huge", size=1000)))
    assert run(store.get("huge", None)) is None and run(store.get("b", None)) is not None


def test_memory_store_counts_its_item_index_against_its_bytes():
    """Each stored item's index entry costs memory beyond the record's JSON: a record of many small items is bounded
    by both (the JSON alone let the index grow past max_bytes several times over)."""
    items = [{"id": f"m{i}"} for i in range(100)]
    store = MemoryStore(max_bytes=100 * INDEX_ENTRY_BYTES)
    run(store.put({**record("many"), "input_items": items}))
    assert run(store.get("many", None)) is None and store.bytes == 0
    run(store.put({**record("some"), "input_items": items[:10]}))
    assert store.bytes >= 10 * INDEX_ENTRY_BYTES and run(store.get_items(["m9"], None)) == {"m9": {"id": "m9"}}


def test_memory_store_expires_records():
    now = [0.0]
    store = MemoryStore(ttl_s=60, clock=lambda: now[0])
    run(store.put(record("a")))
    now[0] = 59
    assert run(store.get("a", None)) is not None
    now[0] = 60
    assert run(store.get("a", None)) is None and len(store) == 0 and store.bytes == 0


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_another_owners_record_is_missing(kind, redis_url):
    async def check():
        store = MemoryStore() if kind == "memory" else RedisStore(redis_url, ttl_s=120)
        await store.put(record("r1", owner="tenant-a"))
        assert (await store.get("r1", "tenant-a"))["owner"] == "tenant-a"
        assert await store.get("r1", "tenant-b") is None and await store.get("r1", None) is None
        assert not await store.delete("r1", "tenant-b")
        assert await store.delete("r1", "tenant-a") and await store.get("r1", "tenant-a") is None
        await store.close()

    run(check())


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_an_item_is_found_by_its_owner_only_while_its_response_is_stored(kind, redis_url):
    """item_reference's lookup: an item of a stored response (input or output), for its owner alone; gone with the
    response; the last response stored that holds it answers. An id that spells an item key is no record."""

    async def check():
        store = MemoryStore() if kind == "memory" else RedisStore(redis_url, ttl_s=120, prefix="items:")
        first = {**record("r1", owner="a"), "input_items": [{"id": "msg_in", "text": "1"}]}
        first["response"]["output"] = [{"id": "msg_out", "text": "out"}]
        await store.put(first)
        await store.put({**record("r2", owner="b"), "input_items": [{"id": "msg_in", "text": "b's own"}]})
        found = await store.get_items(["msg_out", "msg_in", "msg_out", "nowhere"], "a")
        assert found == {"msg_out": {"id": "msg_out", "text": "out"}, "msg_in": {"id": "msg_in", "text": "1"}}
        assert await store.get_items(["msg_in", "msg_out"], "b") == {"msg_in": {"id": "msg_in", "text": "b's own"}}
        assert await store.get_items(["msg_out"], None) == {} and await store.get_items([], "a") == {}
        await store.put({**record("r3", owner="a"), "input_items": [{"id": "msg_in", "text": "1 again"}]})
        assert (await store.get_items(["msg_in"], "a"))["msg_in"]["text"] == "1 again"
        assert await store.delete("r3", "a") and await store.delete("r1", "a")
        assert await store.get_items(["msg_in", "msg_out"], "a") == {}
        assert await store.get('item:["b","msg_in"]', "b") is None  # a key of the index, never read as a record
        await store.close()

    run(check())


def test_redis_records_expire(redis_url):
    run(RedisStore(redis_url, ttl_s=120, prefix="t:").put(record("r2")))
    assert 0 < redis.Redis.from_url(redis_url).ttl("t:r2") <= 120


def test_a_burst_shares_a_few_connections_and_none_fails(redis_url):
    """150 calls at once (a burst of Responses requests): each waits for one of the store's pooled connections; none
    is refused (redis-py's default pool of 100 refused the rest: 503s on a healthy Redis)."""
    admin = redis.Redis.from_url(redis_url)

    async def burst() -> int:
        store = RedisStore(redis_url, ttl_s=120, prefix="burst:", timeout_s=30)  # a loaded machine: never timed out
        before = admin.info("clients")["connected_clients"]
        await asyncio.gather(*(store.put(record(f"r{i}")) for i in range(150)))
        found = await asyncio.gather(*(store.get(f"r{i}", None) for i in range(150)))
        assert all(r is not None for r in found)
        opened = admin.info("clients")["connected_clients"] - before
        await store.close()
        return opened

    assert 0 < run(burst()) <= CALLS_AT_ONCE


def test_redis_down_is_a_503():
    store = RedisStore("redis://127.0.0.1:1/0")
    with pytest.raises(APIError) as e:
        run(store.get("x", None))
    assert e.value.status == 503 and e.value.code == "store_unavailable"


@pytest.mark.parametrize("mode", ["blackhole", "stall"])
def test_a_redis_that_stops_answering_is_a_503_not_a_hang(redis_server, mode):
    """The socket stays open but no answer comes (blackhole: the commands are lost too; stall: they run).

    timeout_s is 1 s, not less: the calls before and after the stall get no more on a loaded host (0.2 s ran out
    there); the three calls during it wait out the one timeout together."""

    async def check(proxy: TcpFaultProxy) -> None:
        store = RedisStore(proxy.url_for("redis"), ttl_s=120, timeout_s=1.0)
        await store.put(record("before-the-stall"))  # a pooled connection open when the stall begins
        proxy.set(mode)
        operations = (store.get("before-the-stall", None), store.put(record("r3")), store.delete("r3", None))
        # a hang fails here instead of stalling the suite
        failures = await asyncio.wait_for(asyncio.gather(*operations, return_exceptions=True), 30)
        for failure in failures:
            assert isinstance(failure, APIError), failure
            assert failure.status == 503 and failure.code == "store_unavailable"
        proxy.set("pass")
        assert (await store.get("before-the-stall", None))["id"] == "before-the-stall"
        await store.close()

    with TcpFaultProxy(redis_server.port) as proxy:
        run(check(proxy))


@pytest.fixture(scope="module")
def two_gateways(door, redis_url) -> Iterator[tuple[str, str]]:
    """Two gateways (replicas) over the same backend, sharing one Redis."""

    def replica():
        return serve(create_app(ModelRegistry([door.another_model()]), response_store=RedisStore(redis_url)))

    with replica() as a, replica() as b:
        yield a, b


def test_a_conversation_continues_on_another_replica(door, two_gateways):
    a, b = two_gateways
    door.say("I am the first answer.")
    first = httpx.post(f"{a}/v1/responses", json={"model": door.model.id, "input": "Hello"}, timeout=30).json()
    door.say("Second.")
    body = {"model": door.model.id, "input": "Again", "previous_response_id": first["id"]}
    second = httpx.post(f"{b}/v1/responses", json=body, timeout=30)
    assert second.status_code == 200, second.text
    assert "I am the first answer." in door.prompt()
    assert httpx.get(f"{b}/v1/responses/{first['id']}").json() == first
    assert httpx.delete(f"{b}/v1/responses/{first['id']}").json()["deleted"] is True
    assert httpx.get(f"{a}/v1/responses/{first['id']}").status_code == 404


KEYS = {"a": "key-of-tenant-a", "b": "key-of-tenant-b"}


@pytest.fixture
def tenant_gate(tmp_path):
    """Real tenant policies: tenants `a` and `b`, each with its key, both allowed every model."""
    for tenant, key in KEYS.items():
        digest = hashlib.sha256(key.encode()).hexdigest()
        (tmp_path / f"{tenant}.yaml").write_text(
            f"tenant: {tenant}\nkeys:\n  - id: {tenant}-key\n    sha256: {digest}\nmodels: ['*']\n"
        )
    store = PolicyStore(tmp_path)
    store.reload()
    return PolicyGate(store, MemoryLimiter(), {}, AuditLog(WholeLines.append_to(tmp_path / "audit.jsonl")))


def test_a_stored_response_belongs_to_its_tenant(door, tenant_gate):
    with serve(create_app(ModelRegistry([door.another_model()]), gate=tenant_gate)) as url:
        door.say("Hello")
        body = {"model": door.model.id, "input": "hi"}
        as_a = {"authorization": f"Bearer {KEYS['a']}"}
        as_b = {"authorization": f"Bearer {KEYS['b']}"}
        made = httpx.post(f"{url}/v1/responses", json=body, headers=as_a, timeout=30).json()
        rid = made["id"]
        for headers, status in ((as_a, 200), (as_b, 404)):
            assert httpx.get(f"{url}/v1/responses/{rid}", headers=headers).status_code == status
            assert httpx.get(f"{url}/v1/responses/{rid}/input_items", headers=headers).status_code == status
        assert httpx.get(f"{url}/v1/responses/{rid}").status_code == 401, "no key, no answer"
        follow = {**body, "previous_response_id": rid}
        r = httpx.post(f"{url}/v1/responses", json=follow, headers=as_b, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["code"] == "previous_response_not_found"
        assert httpx.delete(f"{url}/v1/responses/{rid}", headers=as_b).status_code == 404
        # an item_reference to another tenant's item is answered as one to no item at all
        answer = made["output"][0]["id"]
        refused = []
        for item_id, headers in ((answer, as_b), ("msg_" + "0" * 32, as_b), (answer, as_a)):
            door.say("Hello")
            reference = {**body, "input": [{"type": "item_reference", "id": item_id}]}
            r = httpx.post(f"{url}/v1/responses", json=reference, headers=headers, timeout=30)
            refused.append((r.status_code, r.json()["error"] if r.status_code != 200 else None))
        assert [status for status, _ in refused] == [404, 404, 200]
        assert refused[0][1] == {
            **refused[1][1],
            "message": refused[1][1]["message"].replace("msg_" + "0" * 32, answer),
        }
        assert httpx.delete(f"{url}/v1/responses/{rid}", headers=as_a).status_code == 200


def test_redis_down_is_a_503_or_an_error_event(door):
    from tests.doors.conftest import named_events

    with serve(
        create_app(ModelRegistry([door.another_model()]), response_store=RedisStore("redis://127.0.0.1:1/0"))
    ) as url:
        body = {"model": door.model.id, "input": "hi"}
        door.say("Hello")
        r = httpx.post(f"{url}/v1/responses", json=body, timeout=30)
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
        door.say("Hello")
        events = named_events(httpx.post(f"{url}/v1/responses", json={**body, "stream": True}, timeout=30))
        assert events[-1]["type"] == "error" and events[-1]["code"] == "store_unavailable"
        door.say("Hello")
        assert httpx.post(f"{url}/v1/responses", json={**body, "store": False}, timeout=30).status_code == 200


def test_references_resolve_within_the_body_bound():
    """Each item_reference counts its item's bytes, as if it were sent inline: a few bytes of references to one
    large stored item must not become an input far past the body bound (10,000 of a 16 MB item: 160 GB)."""
    from gateway.api.responses import resolve_references

    store = MemoryStore()
    run(store.put({**record("r1"), "input_items": [{"id": "msg_big", "type": "message", "text": "x" * 300}]}))
    references = [{"type": "item_reference", "id": "msg_big"}] * 3
    assert len(run(resolve_references(references, store, None, 1200))) == 3
    with pytest.raises(APIError) as refused:  # fails before: the input resolved, whatever its size
        run(resolve_references(references * 2, store, None, 1200))
    assert refused.value.status == 400 and refused.value.param == "input"
