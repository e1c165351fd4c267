"""The Redis limiter's idempotency marks: keys and bytes they hold after N admissions (admit + settle each) of one
tenant within one minute, on a real `redis-server` started for the run, against the one-key-per-mark form (a
`SET gw:limits:{t}:a:<holder> 1 PX 120000` per admission, what the scripts wrote before).

    python bench/limiter_marks_bench.py [--admissions 20000]

Bytes: the `used_memory` difference the old form made, and `MEMORY USAGE ... SAMPLES 0` of the sets now (both
count Redis's own per-key and per-member overhead).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import uuid
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from policies.limits import Limits, RedisLimiter
from tests.redis_server import RedisServer


async def limiter_marks(url: str, admissions: int) -> None:
    now = [1_000_000.0]
    limiter = RedisLimiter(url, prefix="bench", clock=lambda: now[0])
    limits = Limits(requests_per_minute=10**6, concurrent_requests=10**6)
    for i in range(admissions):
        await limiter.settle(await limiter.admit("t", limits, f"c{i}", 10), 10)
        now[0] += 60 / admissions  # spread over one minute
    await limiter.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--admissions", type=int, default=20000)
    args = parser.parse_args()
    n = args.admissions
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as server:
        client = redis.Redis(port=server.port)
        before = client.info("memory")["used_memory"]
        asyncio.run(limiter_marks(server.url, n))
        marks = client.keys("bench:{t}:m:*")
        now_bytes = sum(client.memory_usage(k, samples=0) for k in marks)  # every member counted
        client.flushall()
        before = client.info("memory")["used_memory"]
        pipe = client.pipeline(transaction=False)
        for i in range(n):
            pipe.set(f"gw:limits:{{t}}:a:{uuid.uuid4().hex}", 1, px=120_000)
        pipe.execute()
        old_bytes = client.info("memory")["used_memory"] - before
    print(f"| form ({n} admissions in one minute) | keys | bytes per mark |")
    print("|---|---:|---:|")
    print(f"| one key per admission, PX 120 s (before) | {n} | {old_bytes / n:.0f} |")
    print(f"| one set per 10 s of a tenant (now) | {len(marks)} | {now_bytes / n:.0f} |")


if __name__ == "__main__":
    main()
