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


class ResponseStore(Protocol):
    async def put(self, record: Record) -> None: ...

    async def get(self, rid: str, owner: str | None) -> Record | None: ...

    async def delete(self, rid: str, owner: str | None) -> bool: ...

    async def close(self) -> None: ...

    background: list[Callable[[], Awaitable[None]]]
    """Tasks to run while the gateway serves."""


class MemoryStore:
    """Records in this process: the oldest go first past `max_count` records or `max_bytes` of JSON,
    and none outlives `ttl_s` seconds."""

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
        self.bytes = 0
        self.background: list[Callable[[], Awaitable[None]]] = []

    def __len__(self) -> int:
        return len(self._records)

    async def put(self, record: Record) -> None:
        data = orjson.dumps(record)
        self._drop(record["id"])
        if len(data) > self.max_bytes:
            return  # could never fit: kept nowhere, so a continuation of it is a 404
        self._records[record["id"]] = (self._clock() + self.ttl_s, len(data), data)
        self.bytes += len(data)
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

    async def delete(self, rid: str, owner: str | None) -> bool:
        if await self.get(rid, owner) is None:
            return False
        self._drop(rid)
        return True

    async def close(self) -> None:
        self._records.clear()
        self.bytes = 0

    def _drop(self, rid: str) -> None:
        entry = self._records.pop(rid, None)
        if entry is not None:
            self.bytes -= entry[1]


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
        async with _reachable(), self._calls.turn() as redis:
            await redis.set(self.prefix + record["id"], orjson.dumps(record), ex=self.ttl_s)

    async def get(self, rid: str, owner: str | None) -> Record | None:
        async with _reachable(), self._calls.turn() as redis:
            data = await redis.get(self.prefix + rid)
        if data is None:
            return None
        record = orjson.loads(data)
        return record if record["owner"] == owner else None

    async def delete(self, rid: str, owner: str | None) -> bool:
        if await self.get(rid, owner) is None:
            return False
        async with _reachable(), self._calls.turn() as redis:
            await redis.delete(self.prefix + rid)  # 0 when a rerun (redis_calls.py) or another delete came first
        return True

    async def close(self) -> None:
        await self._calls.client.aclose()


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
