"""Stored Responses: each record keeps a response, its input items and the conversation so far.

In memory for one process (bounded in count, bytes and age), or in Redis so that any replica continues
any conversation. Every record has an `owner` (the tenant; None when the gateway runs open): a record
is only ever found by its owner, so another tenant's id reads as missing.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol

import orjson

from gateway.errors import APIError

Record = dict[str, Any]
"""{"id", "owner", "response", "input_items", "history"} as JSON-ready data."""
DAY_S = 24 * 3600


def record_items(record: Record) -> list[dict[str, Any]]:
    """The items a stored response holds (its input, then its output) that an `item_reference` may name."""
    return [*record["input_items"], *record["response"].get("output", ())]


def pick_items(held: dict[str, str], records: dict[str, Record | None]) -> dict[str, dict[str, Any]]:
    """Items by id, from `held` (item id → the response that holds it) and those responses' records (None: gone);
    each record's items are read once, however many of them are asked for."""
    by_record = {rid: {item["id"]: item for item in record_items(r)} for rid, r in records.items() if r is not None}
    found = ((item_id, by_record.get(rid, {}).get(item_id)) for item_id, rid in held.items())
    return {item_id: item for item_id, item in found if item is not None}


class ResponseStore(Protocol):
    async def put(self, record: Record) -> None: ...

    async def get(self, rid: str, owner: str | None) -> Record | None: ...

    async def get_items(self, item_ids: list[str], owner: str | None) -> dict[str, dict[str, Any]]:
        """The items of `owner`'s stored responses (of the last stored that holds each) by id; another owner's, and
        those of deleted or expired responses, are left out as missing ones are."""
        ...

    async def delete(self, rid: str, owner: str | None) -> bool: ...

    async def close(self) -> None: ...

    background: list[Callable[[], Awaitable[None]]]
    """Tasks to run while the gateway serves."""


INDEX_ENTRY_BYTES = 200
"""What one item's entry in the memory store's item index holds (its key, id and slots; about 190-270 bytes by
tracemalloc with short ids, bench/item_index_bench.py), counted with the record's JSON against max_bytes."""


class MemoryStore:
    """Records in this process: the oldest go first past `max_count` records or `max_bytes` (their JSON and item
    index), and none outlives `ttl_s` seconds."""

    def __init__(
        self,
        max_count: int = 10_000,
        max_bytes: int = 256 << 20,
        ttl_s: float = 30 * DAY_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_count, self.max_bytes, self.ttl_s = max_count, max_bytes, ttl_s
        self._clock = clock
        self._records: OrderedDict[str, tuple[float, int, bytes]] = OrderedDict()
        self._items: dict[tuple[str | None, str], str] = {}
        """(owner, item id) → the id of the last stored response that holds the item."""
        self._item_keys: dict[str, list[tuple[str | None, str]]] = {}
        self.bytes = 0
        self.background: list[Callable[[], Awaitable[None]]] = []

    def __len__(self) -> int:
        return len(self._records)

    async def put(self, record: Record) -> None:
        data = orjson.dumps(record)
        self._drop(record["id"])
        keys = [(record["owner"], item["id"]) for item in record_items(record)]
        size = len(data) + INDEX_ENTRY_BYTES * len(keys)
        if size > self.max_bytes:
            return  # could never fit: kept nowhere, so a continuation of it is a 404
        self._records[record["id"]] = (self._clock() + self.ttl_s, size, data)
        self.bytes += size
        self._items.update(dict.fromkeys(keys, record["id"]))
        self._item_keys[record["id"]] = keys
        while len(self._records) > self.max_count or self.bytes > self.max_bytes:
            self._drop(next(iter(self._records)))

    async def get(self, rid: str, owner: str | None) -> Record | None:
        entry = self._records.get(rid)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            self._drop(rid)
            return None
        record = orjson.loads(entry[2])
        return record if record["owner"] == owner else None

    async def get_items(self, item_ids: list[str], owner: str | None) -> dict[str, dict[str, Any]]:
        held = {i: rid for i in item_ids if (rid := self._items.get((owner, i))) is not None}
        return pick_items(held, {rid: await self.get(rid, owner) for rid in set(held.values())})

    async def delete(self, rid: str, owner: str | None) -> bool:
        if await self.get(rid, owner) is None:
            return False
        self._drop(rid)
        return True

    async def close(self) -> None:
        self._records.clear()
        self._items.clear()
        self._item_keys.clear()
        self.bytes = 0

    def _drop(self, rid: str) -> None:
        entry = self._records.pop(rid, None)
        if entry is not None:
            self.bytes -= entry[1]
        for key in self._item_keys.pop(rid, ()):
            if self._items.get(key) == rid:  # a later response holding the same item keeps it
                del self._items[key]


class RedisStore:
    """Records in Redis under `prefix` + id, each expiring after `ttl_s` seconds; Redis down, or silent for
    `timeout_s` seconds (a socket open but no answer), is a 503.

    Calls are bounded as the limiter's are (policies/limits/redis_calls.py: a burst waits for one of a few pooled
    connections instead of opening one per call); `background` closes idle connections the server closed."""

    def __init__(
        self,
        url: str,
        ttl_s: int = 30 * DAY_S,
        prefix: str = "gateway:response:",
        timeout_s: float = 1.0,
        password: str | None = None,
    ):
        from policies.limits.redis_calls import BoundedRedis

        self._calls = BoundedRedis(url, timeout_s, password=password)
        self.ttl_s, self.prefix = ttl_s, prefix
        self.background = self._calls.background

    async def put(self, record: Record) -> None:
        """The record, and for each of its items a key naming the record (owner and id in the key: another owner's
        item of the same id is a key of its own), in one round trip."""
        async with _reachable(), self._calls.turn() as redis:
            batch = redis.pipeline(transaction=False)
            batch.set(self.prefix + record["id"], orjson.dumps(record), ex=self.ttl_s)
            for item in record_items(record):
                batch.set(self._item_key(item["id"], record["owner"]), record["id"], ex=self.ttl_s)
            await batch.execute()

    async def get_items(self, item_ids: list[str], owner: str | None) -> dict[str, dict[str, Any]]:
        """Two round trips however many ids: which responses hold them, then those responses."""
        ids = list(dict.fromkeys(item_ids))
        if not ids:
            return {}
        async with _reachable(), self._calls.turn() as redis:
            rids = await redis.mget([self._item_key(i, owner) for i in ids])
            held = {i: rid.decode() for i, rid in zip(ids, rids) if rid is not None}
            wanted = list(set(held.values()))
            data = await redis.mget([self.prefix + rid for rid in wanted]) if wanted else []
            return pick_items(held, {rid: _record(d, owner) for rid, d in zip(wanted, data)})  # a corrupt one: a 503

    def _item_key(self, item_id: str, owner: str | None) -> str:
        return self.prefix + "item:" + orjson.dumps([owner, item_id]).decode()

    async def get(self, rid: str, owner: str | None) -> Record | None:
        async with _reachable(), self._calls.turn() as redis:
            return _record(await redis.get(self.prefix + rid), owner)  # read in the turn: a corrupt record is a 503

    async def delete(self, rid: str, owner: str | None) -> bool:
        if await self.get(rid, owner) is None:
            return False
        async with _reachable(), self._calls.turn() as redis:
            await redis.delete(self.prefix + rid)  # 0 when a rerun (redis_calls.py) or another delete came first
        return True

    async def close(self) -> None:
        await self._calls.client.aclose()


def _record(data: bytes | None, owner: str | None) -> Record | None:
    """A stored record if `owner` owns it; None for none, another owner's, or a key that holds no record (an id that
    spells an item key)."""
    if data is None or not data.startswith(b"{"):
        return None
    record = orjson.loads(data)
    return record if record["owner"] == owner else None


@asynccontextmanager
async def _reachable() -> AsyncIterator[None]:
    from redis.exceptions import RedisError

    try:
        yield
    except (RedisError, OSError) as e:
        raise APIError(
            f"the response store is unavailable: {e}",
            status=503,
            type="server_error",
            code="store_unavailable",
            retryable=True,
        ) from None
