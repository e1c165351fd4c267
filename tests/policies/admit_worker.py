"""One gateway replica's share of a concurrency test: waits for a start key, fires N parallel admits, prints how many
were admitted. Usage: python -m tests.policies.admit_worker REDIS_URL TENANT N REQUESTS_PER_MINUTE"""

from __future__ import annotations

import asyncio
import sys
import uuid

import redis.asyncio as redis

from policies.limits import Limits, RedisLimiter


async def main(url: str, tenant: str, n: int, rpm: int) -> None:
    limiter = RedisLimiter(url)
    client = redis.Redis.from_url(url)
    print("ready", flush=True)
    while not await client.exists(f"go:{tenant}"):
        await asyncio.sleep(0.005)
    answers = await asyncio.gather(
        *(limiter.admit(tenant, Limits(requests_per_minute=rpm), uuid.uuid4().hex, 1) for _ in range(n))
    )
    print(sum(a.allowed for a in answers), flush=True)
    await client.aclose()
    await limiter.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
