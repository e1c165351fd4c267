"""The idle-connection sweep against a real redis-server: dead idle connections closed, live ones left alone."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as redis

from policies.limits.redis_idle import close_dead_idle
from tests.sockets import close_wait_sockets, eventually

pytestmark = pytest.mark.anyio


async def three_idle(client: redis.Redis) -> list[int]:
    """Three connections in the pool, idle again; their server-side client ids."""
    ids = await asyncio.gather(*(client.execute_command("CLIENT", "ID") for _ in range(3)))
    assert len(set(ids)) == 3
    return sorted(ids)


async def test_live_idle_connections_are_left_as_they_are(redis_server):
    async with redis.Redis.from_url(redis_server.url) as client:
        before = await three_idle(client)
        assert await close_dead_idle(client.connection_pool) == 0
        assert await three_idle(client) == before  # the same connections, none reconnected


async def test_a_restarted_server_leaves_no_close_wait_socket_and_is_used_again(own_redis_server):
    async with redis.Redis.from_url(own_redis_server.url) as client:
        await three_idle(client)
        own_redis_server.kill()
        assert await eventually(lambda: close_wait_sockets(own_redis_server.port) == 3)
        await asyncio.sleep(0.1)  # the event loop reads the EOFs (as a serving gateway's loop does between sweeps)
        own_redis_server.start()
        assert await close_dead_idle(client.connection_pool) == 3
        assert await eventually(lambda: close_wait_sockets(own_redis_server.port) == 0)
        assert await client.set("k", "v") and await client.get("k") == b"v"
