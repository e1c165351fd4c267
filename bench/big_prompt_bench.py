"""Does a huge prompt stall other streams? One paced stream runs through the gateway while a chat of
--messages messages (max_tokens 1) arrives; reported: the running stream's largest gap between two chunks
while the big request is in the gateway, against its gaps before, and the big request's latency.

Real processes: bench/fast_backend.py (one decode step every --interval-ms) and `gateway serve` in front of it.

    python bench/big_prompt_bench.py [--messages 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from overhead_bench import MODEL, gateway_on_stand_in, machine


async def one_round(url: str, messages: int) -> tuple[float, float, float]:
    """(largest gap before the big request, largest gap while it is served, its latency), in ms."""
    big = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} says hello"} for i in range(messages)
    ]
    arrivals: list[float] = []
    window: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def stream() -> None:
            body = {"model": MODEL, "messages": big[:1], "stream": True, "max_tokens": 400}
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                async for _ in r.aiter_lines():
                    arrivals.append(time.perf_counter())

        async def big_request() -> None:
            await asyncio.sleep(1.0)
            window.append(time.perf_counter())
            r = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": big, "max_tokens": 1})
            # 10,000 messages do not fit an 8K context: the answer is a 400, after all the rendering and encoding.
            assert r.status_code == 200 or r.json()["error"]["code"] == "context_length_exceeded", r.text[:300]
            window.append(time.perf_counter())

        await asyncio.gather(stream(), big_request())
    start, end = window
    gaps = [(b - a, b) for a, b in itertools.pairwise(arrivals)]
    before = max(g for g, at in gaps if at < start)
    during = max(g for g, at in gaps if start <= at <= end + 0.05)
    return before * 1000, during * 1000, (end - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval-ms", type=float, default=15.0)
    args = parser.parse_args()
    print(machine())
    with (
        tempfile.TemporaryDirectory(prefix="big-prompt-bench-") as tmp,
        gateway_on_stand_in(Path(tmp), args.interval_ms) as (_, _, port),
    ):
        url = f"http://127.0.0.1:{port}"
        results = [asyncio.run(one_round(url, args.messages)) for _ in range(args.rounds)]
    print(f"\n{args.messages} messages, one stream paced at {args.interval_ms} ms, {args.rounds} rounds")
    print("| measure (ms) | median | max |\n|---|---:|---:|")
    for i, name in enumerate(
        ("stream's largest gap before", "stream's largest gap while the big request is served", "big request latency")
    ):
        values = [r[i] for r in results]
        print(f"| {name} | {statistics.median(values):.1f} | {max(values):.1f} |")


if __name__ == "__main__":
    main()
