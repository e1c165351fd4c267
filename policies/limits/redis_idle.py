"""Idle Redis connections the server closed, closed here too: no CLOSE-WAIT socket held by an idle gateway.

redis-py notices a connection the server dropped (restart, `CLIENT KILL`, the server's `timeout`) only when it next
checks that connection out. Every `IDLE_SWEEP_S` seconds `sweep_idle_forever` looks at the pool's idle connections
and disconnects each whose socket is at EOF (or holds bytes no command asked for, which redis-py's own check-out
treats the same way). A disconnected connection stays in the pool and reconnects on its next command, as after any
connection error, so a restarted server is used again transparently. Nothing is read from a socket and no command
is sent; a connection in use by a command is never touched (the sweep holds the pool's lock, which check-out and
release take).

redis-py has no public list of a pool's idle connections, so this reads `ConnectionPool._available_connections`
and `_lock` (both in redis-py 5 to 8); `Connection.is_connected`, `can_read` and `disconnect` are public.
"""

from __future__ import annotations

import asyncio
import logging

from redis.asyncio import ConnectionPool
from redis.exceptions import RedisError

IDLE_SWEEP_S = 2.0
"""Seconds between sweeps: the longest an idle dead connection stays open."""

log = logging.getLogger(__name__)


async def close_dead_idle(pool: ConnectionPool) -> int:
    """Disconnect the pool's idle connections whose peer closed them; how many."""
    closed = 0
    async with pool._lock:  # check-out and release wait: no connection changes hands meanwhile
        for connection in list(pool._available_connections):
            if not connection.is_connected:
                continue
            try:
                dead = await connection.can_read()  # EOF or unasked-for bytes: never reused as it is
            except (RedisError, OSError):
                dead = True  # can_read disconnected it already
            if dead:
                await connection.disconnect(nowait=True)
                closed += 1
    return closed


async def sweep_idle_forever(pool: ConnectionPool, interval_s: float = IDLE_SWEEP_S) -> None:
    """`close_dead_idle` every `interval_s` seconds until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            closed = await close_dead_idle(pool)
        except (RedisError, OSError) as exc:  # a close that timed out: the next sweep tries again
            log.warning("sweeping idle Redis connections failed: %s", exc)
            continue
        if closed:
            log.info("closed %d idle Redis connection(s) the server had closed", closed)
