"""A redis-py client whose calls are bounded: CALLS_AT_ONCE pooled connections, and a turn to wait for one.

The limiter and the Redis response store share it. redis-py's pool refuses a call past its max_connections (100 by
default in redis-py 8: 'Too many connections'), which turned a burst of requests on a healthy Redis into store errors
(503s). So a call waits its turn while the calls ahead of it keep being answered, however long the queue, and fails
as any call to an unreachable Redis does once none has been answered for `timeout_s` (a stalled store).

A call whose connection breaks (closed by the server, reset, refused) is sent again on a fresh connection, up to
RECONNECTS times: a pooled connection the server closed just as a call went out on it (its idle `timeout`, a
`CLIENT KILL`, a restart) is not a store error. The call may have run before its answer was lost, so every call made
through a BoundedRedis must be idempotent (GET, SET, DEL; the limiter's scripts are, per admission). A call that
timed out is not sent again: a stalled store fails within `timeout_s`, not a multiple of it.

An answer that does not parse (a corrupted one: redis-py's parser reads a broken length or integer line with `int()`,
a ValueError that is no RedisError) is InvalidResponse, a RedisError like any store failure: the caller's store error
(a 503, or the tenant's `on_store_error`), never a crash, and the limiter takes back what the call may have reserved.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse
from redis.exceptions import TimeoutError as RedisTimeoutError

from .redis_idle import sweep_idle_forever

CALLS_AT_ONCE = 64
"""Calls to Redis in flight at once per client, each on a pooled connection; more wait their turn."""
RECONNECTS = 2
"""Times a call whose connection broke is sent again, each on a new connection, at once."""


class BoundedRedis:
    """`client` (redis-py, `options` passed on) with at most CALLS_AT_ONCE connections; `background` closes the idle
    ones the server closed (redis_idle.py)."""

    def __init__(self, url: str, timeout_s: float, **options: Any) -> None:
        self.client = redis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            max_connections=CALLS_AT_ONCE,
            retry=Retry(NoBackoff(), RECONNECTS, supported_errors=(RedisConnectionError,)),
            **options,
        )
        self._timeout_s = timeout_s
        self._calls = asyncio.Semaphore(CALLS_AT_ONCE)
        self._answered_at = 0.0
        """The loop time of the last call Redis answered: a turn is waited for while answers keep coming."""
        self.background = [partial(sweep_idle_forever, self.client.connection_pool)]

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[redis.Redis]:
        """One of the CALLS_AT_ONCE calls; redis-py's TimeoutError (a RedisError) once no call was answered for
        timeout_s while this one waited; InvalidResponse for an answer read in the turn that does not parse."""
        loop = asyncio.get_running_loop()
        await self._wait_for_turn(loop, loop.time())
        try:
            yield self.client
            self._answered_at = loop.time()
        except ValueError as exc:  # redis-py disconnected the connection it could not read: the next call has a new one
            raise InvalidResponse(f"Redis sent an answer that does not parse: {exc}") from exc
        finally:
            self._calls.release()

    async def _wait_for_turn(self, loop: asyncio.AbstractEventLoop, since: float) -> None:
        while True:
            try:
                async with asyncio.timeout_at(max(since, self._answered_at) + self._timeout_s):
                    await self._calls.acquire()
                return
            except TimeoutError:
                if self._answered_at + self._timeout_s <= loop.time():
                    raise RedisTimeoutError(
                        f"{CALLS_AT_ONCE} calls to Redis unanswered for {self._timeout_s:g} s"
                    ) from None
