"""The retry a refusal answers, and what timing it costs, when it needs more of the window than its oldest RETRY_SCAN
entries (read then by the window's sums), in each store:

- `behind aged-out`: a burst of N one-token admissions, one more 30 s later, then, past the burst's minute, 60 % and
  30 % of tokens_per_minute at +62 s and +64 s and a refusal at +65 s: the in-memory log still holds most of the burst
  (aged out, cleaned CLEAN_PER_CALL a call), ahead of the three admissions that are in the window.
- `past RETRY_SCAN`: N one-token admissions over 50 s (all in the window), then a refusal that needs half of them to
  leave.

    python bench/limiter_retry_bench.py [--entries 100000] [--tree PATH] [--store redis|memory] [--redis-url URL]

`--tree` runs another checkout's limiter (main's, for the figures before a change). Cost: Redis, the server's CPU time
for the refusal (the `usec` of `EVALSHA` in `INFO commandstats` around it: every tenant's call waits that long);
memory, the process's CPU time (`time.process_time`) around the refusal (the event loop's).
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
T0 = 1_000_000.0


async def fill(limiter, tenant: str, limits, now: list[float], count: int, start: float, span_s: float) -> None:
    """`count` one-token admissions of `tenant` from `start` over `span_s` seconds (AT_ONCE at a time)."""
    for first in range(0, count, AT_ONCE):
        now[0] = start + span_s * first / count
        batch = range(first, min(count, first + AT_ONCE))
        answers = await asyncio.gather(*(limiter.admit(tenant, limits, f"f{start}-{i}", 1) for i in batch))
        assert all(a.allowed for a in answers)


async def scenarios(
    make: Callable[[], object], spent: Callable[[], int], entries: int
) -> list[tuple[str, float, float]]:
    """(scenario, the refusal's retry s, its cost ms) of each scenario, on a fresh tenant each."""
    from policies.limits import Limits  # from --tree's checkout

    rows = []
    now = [T0]
    limiter = make(now)
    tpm = entries + 1
    limits = Limits(tokens_per_minute=tpm)
    await fill(limiter, "t1", limits, now, entries, T0, 0.0)
    now[0] = T0 + 30
    assert (await limiter.admit("t1", limits, "kept", 1)).allowed
    for at, tokens in ((62, tpm * 6 // 10), (64, tpm * 3 // 10)):
        now[0] = T0 + at
        assert (await limiter.admit("t1", limits, f"late-{at}", tokens)).allowed
    now[0] = T0 + 65
    rows.append(("behind aged-out", *await refusal(limiter, "t1", limits, tpm * 2 // 10, spent)))
    await limiter.close()

    now = [T0 + 1000]
    limiter = make(now)
    limits = Limits(tokens_per_minute=entries)
    await fill(limiter, "t2", limits, now, entries, T0 + 1000, 50.0)
    now[0] = T0 + 1051
    rows.append(("past RETRY_SCAN", *await refusal(limiter, "t2", limits, entries // 2, spent)))
    await limiter.close()
    return rows


async def refusal(limiter, tenant: str, limits, tokens: int, spent: Callable[[], int]) -> tuple[float, float]:
    """The retry (s) a refusal of `tokens` answers, and its cost (ms)."""
    before = spent()
    answer = await limiter.admit(tenant, limits, "refused", tokens)
    cost = (spent() - before) / 1000
    assert not answer.allowed and answer.limit == "tokens_per_minute", answer
    return answer.retry_after_s, cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--tree", type=Path, default=REPOSITORY)
    parser.add_argument("--store", choices=("redis", "memory"), default="redis")
    parser.add_argument("--redis-url", help="a redis-server to use (default: one started for the run)")
    args = parser.parse_args()
    sys.path[:0] = [str(args.tree.resolve()), str(REPOSITORY)]
    from policies.limits import MemoryLimiter, RedisLimiter

    if args.store == "memory":
        rows = asyncio.run(
            scenarios(
                lambda now: MemoryLimiter(clock=lambda: now[0]), lambda: int(time.process_time() * 1e6), args.entries
            )
        )
    else:

        def run(url: str) -> list[tuple[str, float, float]]:
            admin = redis.Redis.from_url(url)
            admin.flushall()

            def usec() -> int:
                return admin.info("commandstats").get("cmdstat_evalsha", {"usec": 0})["usec"]

            def make(now: list[float]) -> RedisLimiter:
                return RedisLimiter(url, prefix="retry-bench", clock=lambda: now[0], timeout_s=60)

            try:
                return asyncio.run(scenarios(make, usec, args.entries))
            finally:
                admin.close()

        if args.redis_url:
            rows = run(args.redis_url)
        else:
            redis_server = importlib.import_module("tests.redis_server")
            with tempfile.TemporaryDirectory() as tmp, redis_server.RedisServer(Path(tmp)) as server:
                rows = run(server.url)
    print(f"{args.entries} entries, {args.store} limiter of {args.tree}")
    print(f"| {'scenario':<17} | {'retry-after s':>13} | {'refusal ms':>10} |")
    print(f"|{'-' * 19}|{'-' * 14}:|{'-' * 11}:|")
    for label, retry, cost in rows:
        print(f"| {label:<17} | {retry:>13.3f} | {cost:>10.3f} |")


if __name__ == "__main__":
    main()
