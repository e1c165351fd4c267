"""Policy overhead: the latency admit + settle adds to one request, in memory and with a local redis-server.

Each request is `admit` (all four limits set, high enough never to refuse) followed by `settle`, timed together
with `time.perf_counter_ns`, on uvloop when installed (the gateway's loop). Two loads per store: one request at a time
(the latency a lone request pays) and --concurrency requests in flight (each request's own latency while others
run: in memory that is mostly waiting for the loop's other clients), over --tenants tenants; and the client's CPU
time per request (this process: the whole cost in memory, the client side with Redis). Redis is a real `redis-server` on 127.0.0.1 started for the run (no persistence).
The sliding windows fill as they would under load: every admission stays in its tenant's window for a minute.

    python bench/policy_bench.py [--requests 20000] [--concurrency 16] [--tenants 8] [--slow-redis-ms 200]
                                 [--model-limits]

With --model-limits, every request's model has limits of its own too (`limits.models`: the same four, never
refusing), so each admit and settle counts in two windows. A last line gives Redis's own time per script call
(`INFO commandstats`: what every other tenant's calls wait behind).

With --slow-redis-ms, side by side in the same run: the same Redis behind tests/faults/tcp_proxy.py holding every
reply that long (--slow-requests per row, --slow-concurrency in flight), and stalled (no reply at all; limits that
fail open, so each admit is bounded by the limiter's timeout and then admits).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from policies.limits import Limiter, Limits, MemoryLimiter, RedisLimiter
from tests.faults.tcp_proxy import TcpFaultProxy
from tests.redis_server import RedisServer

LIMITS = Limits(
    requests_per_minute=10**9,
    tokens_per_minute=10**12,
    concurrent_requests=10**6,
    tokens_per_day=10**15,
    on_store_error="open",
)
_charges = itertools.count()
MODEL_LIMITS: Limits | None = None
"""The model's own limits (--model-limits: LIMITS), or None."""


async def _one(limiter: Limiter, tenant: str) -> int:
    start = time.perf_counter_ns()
    charge = f"charge-{next(_charges)}"
    own = {} if MODEL_LIMITS is None else {"model": "m", "model_limits": MODEL_LIMITS}
    admission = await limiter.admit(tenant, LIMITS, charge, 1200, **own)
    await limiter.settle(admission, 700)
    elapsed = time.perf_counter_ns() - start
    if not admission.allowed:
        raise RuntimeError(f"refused: {admission.limit}")
    return elapsed


async def _run(limiter: Limiter, requests: int, concurrency: int, tenants: int) -> list[int]:
    names = [f"tenant-{i}" for i in range(tenants)]
    latencies: list[int] = []

    async def client(k: int) -> None:
        for i in range(k, requests, concurrency):
            latencies.append(await _one(limiter, names[i % tenants]))

    await asyncio.gather(*(client(k) for k in range(concurrency)))
    return latencies


def _row(store: str, load: str, latencies: list[int], wall_s: float, cpu_s: float) -> str:
    ms = sorted(n / 1e6 for n in latencies)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return (
        f"| {store} | {load} | {len(ms)} | {statistics.median(ms):.3f} | {p99:.3f} | {len(ms) / wall_s:,.0f} "
        f"| {cpu_s / len(ms) * 1e6:.0f} |"
    )


async def _bench(
    limiter: Limiter,
    store: str,
    args: argparse.Namespace,
    requests: int,
    concurrency: int,
    lone_requests: int | None = None,
    warm_up: int = 2000,
) -> list[str]:
    """Rows for one request at a time (`lone_requests` of them, default `requests`) and `concurrency` in flight."""
    await _run(limiter, min(warm_up, requests), concurrency, args.tenants)  # warm-up (connections, scripts)
    rows = []
    loads = [("1 at a time", 1, lone_requests or requests)]
    if concurrency > 1:
        loads.append((f"{concurrency} in flight", concurrency, requests))
    for load, clients, count in loads:
        start, cpu = time.perf_counter(), time.process_time()
        latencies = await _run(limiter, count, clients, args.tenants)
        rows.append(_row(store, load, latencies, time.perf_counter() - start, time.process_time() - cpu))
    return rows


async def _slow_redis(server: RedisServer, args: argparse.Namespace) -> list[str]:
    """The rows of a Redis that answers late, then of one that does not answer."""
    with TcpFaultProxy(server.port) as proxy:
        limiter = RedisLimiter(proxy.url_for("redis"))
        limiter.settle_backlog.retry_delays_s = ()  # a stalled settle is retried in the background: not timed here
        proxy.set("delay", delay_s=args.slow_redis_ms / 1000)
        store = f"redis +{args.slow_redis_ms} ms per reply"
        slow = args.slow_requests, args.slow_concurrency
        rows = await _bench(limiter, store, args, *slow, lone_requests=20, warm_up=args.slow_concurrency)
        print(f"{store}: {limiter.store_errors} calls timed out (each would have applied on_store_error)")
        proxy.set("stall")
        rows += await _bench(limiter, "redis stalled (fails open)", args, 4, 1, warm_up=0)
        await limiter.close()
    return rows


async def main(args: argparse.Namespace) -> None:
    rows = await _bench(MemoryLimiter(), "memory", args, args.requests, args.concurrency)
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as server:
        limiter = RedisLimiter(server.url)
        rows += await _bench(limiter, "redis (local)", args, args.requests, args.concurrency)
        scripts = await limiter._redis.info("commandstats")
        await limiter.close()
        if args.slow_redis_ms:
            rows += await _slow_redis(server, args)
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    load_avg = Path("/proc/loadavg").read_text().split()[0]
    print(
        f"admit + settle per request; {args.tenants} tenants; Python {platform.python_version()}, loop {loop}; "
        f"load average {load_avg} on {os.cpu_count()} CPUs"
    )
    print("| store | load | requests | p50 ms | p99 ms | requests/s | client CPU µs/request |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    calls = scripts.get("cmdstat_evalsha", {})
    print(f"redis (local): {calls.get('calls', 0)} script calls, {calls.get('usec_per_call', 0):.2f} µs of Redis each")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--slow-redis-ms", type=int, default=0, help="also time a Redis that answers this late")
    parser.add_argument("--slow-requests", type=int, default=500)
    parser.add_argument("--slow-concurrency", type=int, default=50)
    parser.add_argument("--model-limits", action="store_true", help="each request's model has limits of its own too")
    if parser.parse_args().model_limits:
        MODEL_LIMITS = LIMITS
    try:
        import uvloop
    except ImportError:
        asyncio.run(main(parser.parse_args()))
    else:
        uvloop.run(main(parser.parse_args()))
