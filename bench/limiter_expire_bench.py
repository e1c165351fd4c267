"""The time of one limiter call after a burst left the window: a burst of N admissions (admit + settle) of one tenant
within one second, one more admission 30 s later (so the window is not empty), then, 70 s after the burst, the calls
that find the burst aged out.

    python bench/limiter_expire_bench.py [--burst 100000] [--tree PATH] [--store redis|memory]

`--tree` runs another checkout's limiter (for instance main's, for the figures before a change). Redis (a real
`redis-server` started for the run): each call's time is the server's CPU time for it, the `usec` of `EVALSHA` in
`INFO commandstats` before and after the call (no client, network or scheduling in it); Redis runs one script at a
time: that is how long every tenant's call waited. Memory: the process's CPU time (`time.process_time`) around the
call, in the event loop, where every request of the gateway waited that long (the burst's mean includes the bench's
own asyncio work).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

REPOSITORY = Path(__file__).resolve().parents[1]
AT_ONCE = 64


def script_usec(admin: redis.Redis) -> tuple[int, int]:
    """(calls, usec) of EVALSHA so far."""
    stats = admin.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return stats["calls"], stats["usec"]


async def run(limiter, now: list[float], spent: Callable[[], tuple[int, int]], burst: int) -> list[tuple[str, float]]:
    """The store's time for the burst's calls and the calls after it left; `spent()` gives (calls, usec) so far."""
    from policies.limits import Limits  # from --tree's checkout (main puts it first on the path)

    limits = Limits(requests_per_minute=10**7, tokens_per_minute=10**12)

    async def one(i: int) -> None:
        await limiter.settle(await limiter.admit("t", limits, f"c{i}", 10), 10)

    calls, usec = spent()
    for start in range(0, burst, AT_ONCE):
        await asyncio.gather(*(one(i) for i in range(start, min(burst, start + AT_ONCE))))
        now[0] += AT_ONCE / burst  # the burst spread over one second
    after_calls, after_usec = spent()
    rows = [("burst: a call on average", (after_usec - usec) / (after_calls - calls) / 1000)]
    now[0] += 30
    await limiter.admit("t", limits, "kept", 10)
    now[0] += 40
    for label in ("first call after the burst left", "second call", "third call"):
        calls, usec = spent()
        await limiter.admit("t", limits, label, 10)
        after_calls, after_usec = spent()
        assert after_calls == calls + 1
        rows.append((label, (after_usec - usec) / 1000))
        now[0] += 0.001
    return rows


async def run_redis(url: str, burst: int) -> list[tuple[str, float]]:
    """Redis's own time per call (EVALSHA's usec), and the window entries left in its keys."""
    from policies.limits import RedisLimiter

    now = [1_000_000.0]
    limiter = RedisLimiter(url, prefix="bench", clock=lambda: now[0], timeout_s=60)  # a loaded host
    admin = redis.Redis.from_url(url)
    rows = await run(limiter, now, lambda: script_usec(admin), burst)
    rows.append(("window entries left in Redis", admin.zcard("bench:{t}:w") + admin.zcard("bench:{t}:w2")))
    await limiter.close()
    admin.close()
    return rows


async def run_memory(burst: int) -> list[tuple[str, float]]:
    """The process's CPU time per call of the in-memory store, and the window entries left in it."""
    from policies.limits import MemoryLimiter

    now = [1_000_000.0]
    limiter = MemoryLimiter(clock=lambda: now[0])
    made = [0]
    admit, settle = limiter.admit, limiter.settle

    async def counted(call, *args, **kwargs):
        made[0] += 1
        return await call(*args, **kwargs)

    limiter.admit = lambda *a, **k: counted(admit, *a, **k)
    limiter.settle = lambda *a, **k: counted(settle, *a, **k)
    rows = await run(limiter, now, lambda: (made[0], int(time.process_time() * 1e6)), burst)
    rows.append(("window entries left in memory", len(limiter._tenants["t"].log)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burst", type=int, default=100_000)
    parser.add_argument("--tree", type=Path, default=REPOSITORY)
    parser.add_argument("--store", choices=("redis", "memory"), default="redis")
    args = parser.parse_args()
    sys.path[:0] = [str(args.tree.resolve()), str(REPOSITORY)]
    if args.store == "memory":
        rows = asyncio.run(run_memory(args.burst))
    else:
        redis_server = importlib.import_module("tests.redis_server")
        with tempfile.TemporaryDirectory() as tmp, redis_server.RedisServer(Path(tmp)) as server:
            rows = asyncio.run(run_redis(server.url, args.burst))
    print(f"burst {args.burst}, {args.store} limiter of {args.tree}")
    print(f"| {'call':<34} | {'ms':>9} |")
    print(f"|{'-' * 36}|{'-' * 11}:|")
    for label, value in rows:
        print(f"| {label:<34} | {value:>9.3f} |" if isinstance(value, float) else f"| {label:<34} | {value:>9} |")


if __name__ == "__main__":
    main()
