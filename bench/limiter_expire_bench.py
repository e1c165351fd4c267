"""Redis's own time for one limiter call after a burst left the window, on a real `redis-server` started for the run:
a burst of N admissions (admit + settle) of one tenant within one second, one more admission 30 s later (so the
window is not empty), then, 70 s after the burst, the calls that find the burst aged out.

    python bench/limiter_expire_bench.py [--burst 100000] [--tree PATH]

`--tree` runs another checkout's limiter (for instance main's, for the figures before a change). Each call's time is
the server's CPU time for it: the `usec` of `EVALSHA` in `INFO commandstats` before and after the call (no client,
network or scheduling in it). Redis runs one script at a time: that is how long every tenant's call waited.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import tempfile
from pathlib import Path

import redis

REPOSITORY = Path(__file__).resolve().parents[1]
AT_ONCE = 64


def script_usec(admin: redis.Redis) -> tuple[int, int]:
    """(calls, usec) of EVALSHA so far."""
    stats = admin.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return stats["calls"], stats["usec"]


async def run(url: str, burst: int) -> list[tuple[str, float]]:
    """Redis's time for the burst's calls and the calls after it left, and the entries left."""
    from policies.limits import Limits, RedisLimiter  # from --tree's checkout (main puts it first on the path)

    now = [1_000_000.0]
    limiter = RedisLimiter(url, prefix="bench", clock=lambda: now[0], timeout_s=60)  # a loaded host
    limits = Limits(requests_per_minute=10**7, tokens_per_minute=10**12)
    admin = redis.Redis.from_url(url)

    async def one(i: int) -> None:
        await limiter.settle(await limiter.admit("t", limits, f"c{i}", 10), 10)

    calls, usec = script_usec(admin)
    for start in range(0, burst, AT_ONCE):
        await asyncio.gather(*(one(i) for i in range(start, min(burst, start + AT_ONCE))))
        now[0] += AT_ONCE / burst  # the burst spread over one second
    after_calls, after_usec = script_usec(admin)
    rows = [("burst: a call on average", (after_usec - usec) / (after_calls - calls) / 1000)]
    now[0] += 30
    await limiter.admit("t", limits, "kept", 10)
    now[0] += 40
    for label in ("first call after the burst left", "second call", "third call"):
        calls, usec = script_usec(admin)
        await limiter.admit("t", limits, label, 10)
        after_calls, after_usec = script_usec(admin)
        assert after_calls == calls + 1
        rows.append((label, (after_usec - usec) / 1000))
        now[0] += 0.001
    rows.append(("window entries left in Redis", admin.zcard("bench:{t}:w") + admin.zcard("bench:{t}:w2")))
    await limiter.close()
    admin.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burst", type=int, default=100_000)
    parser.add_argument("--tree", type=Path, default=REPOSITORY)
    args = parser.parse_args()
    sys.path[:0] = [str(args.tree.resolve()), str(REPOSITORY)]
    redis_server = importlib.import_module("tests.redis_server")
    with tempfile.TemporaryDirectory() as tmp, redis_server.RedisServer(Path(tmp)) as server:
        rows = asyncio.run(run(server.url, args.burst))
    print(f"burst {args.burst}, limiter of {args.tree}")
    print(f"| {'call':<34} | {'Redis ms':>9} |")
    print(f"|{'-' * 36}|{'-' * 11}:|")
    for label, value in rows:
        print(f"| {label:<34} | {value:>9.3f} |" if isinstance(value, float) else f"| {label:<34} | {value:>9} |")


if __name__ == "__main__":
    main()
