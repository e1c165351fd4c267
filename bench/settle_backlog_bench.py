"""A Redis outage under a stream of requests: what the limiter holds for the settlements the store missed.

Redis is black-holed (a TCP fault proxy in front of a local redis-server: what the limiter sends is lost) while waves
of admits arrive and fail (each tenant fails open); after each wave the table shows the asyncio tasks alive beyond
those before the outage, the settlements waiting in the backlog, those dropped to their lease, and the memory traced
(tracemalloc) beyond what it held before the outage. Then Redis answers again and the time the backlog took to drain.

    PYTHONPATH=$PWD .venv/bin/python bench/settle_backlog_bench.py --waves 8 --per-wave 2000
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path

from policies.limits import Limits, RedisLimiter
from tests.faults.tcp_proxy import TcpFaultProxy
from tests.redis_server import RedisServer


async def _outage(upstream_port: int, waves: int, per_wave: int) -> None:
    with TcpFaultProxy(upstream_port) as proxy:
        limiter = RedisLimiter(proxy.url_for("redis"), timeout_s=0.2)
        tenant, limits = uuid.uuid4().hex, Limits(requests_per_minute=10**7, on_store_error="open")
        await limiter.admit(tenant, limits, "warm", 1)
        tasks_before = len(asyncio.all_tasks())
        tracemalloc.start()
        traced_before = tracemalloc.get_traced_memory()[0]
        proxy.set("blackhole")
        print("| failed admits | tasks alive | pending | dropped | traced MB |")
        print("|---|---|---|---|---|")
        for wave in range(1, waves + 1):
            await asyncio.gather(*(limiter.admit(tenant, limits, f"c{wave}-{i}", 1) for i in range(per_wave)))
            backlog = getattr(limiter, "settle_backlog", None)  # none before it (one task per missed settlement)
            pending, dropped = (backlog.pending, backlog.dropped) if backlog else ("-", "-")
            traced = (tracemalloc.get_traced_memory()[0] - traced_before) / 2**20
            tasks = len(asyncio.all_tasks()) - tasks_before
            print(f"| {wave * per_wave} | {tasks} | {pending} | {dropped} | {traced:.1f} |")
        tracemalloc.stop()
        proxy.set("pass")
        started = time.perf_counter()
        await limiter.probe_store()
        await limiter.settled()
        print(f"\nbacklog drained {time.perf_counter() - started:.2f} s after Redis answered again")
        await limiter.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--waves", type=int, default=8)
    parser.add_argument("--per-wave", type=int, default=2000)
    parser.add_argument("--redis-port", type=int, help="a redis-server already running (default: one of its own)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # one warning per failed call
    if args.redis_port:
        asyncio.run(_outage(args.redis_port, args.waves, args.per_wave))
        return
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as server:
        asyncio.run(_outage(server.port, args.waves, args.per_wave))


if __name__ == "__main__":
    main()
