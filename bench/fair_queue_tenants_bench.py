"""FairQueue with many tenants: the CPU time to start one waiting request of each of N tenants, all waiting at
once behind a full queue (each freed slot picks the next tenant), and the virtual finish times it keeps after.

    python bench/fair_queue_tenants_bench.py [--tenants 1000 10000] [--capacity 8]

CPU time of this process (`time.process_time`), so other load on the machine matters less than to a wall clock.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from policies.limits.fair_queue import FairQueue


async def run(tenants: int, capacity: int) -> tuple[float, int]:
    """CPU seconds to serve one request of each of `tenants` tenants waiting at once; F entries kept after."""
    queue = FairQueue(capacity)

    async def one(tenant: int) -> None:
        async with queue.slot(f"tenant-{tenant}", 1.0, 100, 3600.0):
            await asyncio.sleep(0)

    started = time.process_time()
    await asyncio.gather(*(one(t) for t in range(tenants)))
    return time.process_time() - started, len(queue._finish)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--capacity", type=int, default=8)
    args = parser.parse_args()
    print("| tenants waiting | CPU s to start all | CPU µs per start | F entries kept |")
    print("|---:|---:|---:|---:|")
    for tenants in args.tenants:
        cpu, kept = asyncio.run(run(tenants, args.capacity))
        print(f"| {tenants} | {cpu:.2f} | {cpu / tenants * 1e6:.0f} | {kept} |")


if __name__ == "__main__":
    main()
