"""Batch-1 decode of the bundled worker, interleaved A/B: transformers, a baseline checkout's worker and this
checkout's worker take turns, round after round, so a shared host's load falls on all of them alike.

    python bench/worker_ab.py --baseline /work/main [--rounds 5] [--tokens 64] [--threads 2] [--auto]
                              [--concurrent 8]

Each round streams one greedy request of `--tokens` tokens from every worker (its decode rate: events after the
first over their span) and times transformers `generate` on the same prompt (less its prefill and first token);
prompts rotate between rounds. Prints the medians, the ratios to transformers, the engine step time of each
worker (its own timer), its torch thread count after each round (main's worker does not report one) and the load
average before and after. `--auto` adds this checkout's worker started with
`--threads auto`. Every engine but the auto one runs `--threads` torch threads. `--concurrent N` adds, in each
round and for every worker, N greedy requests streamed at once (the first N prompts, as `worker_bench.py`'s
concurrent figure): their aggregate tok/s (all tokens over the wall time from the first request to the last
token), its ratio to the same worker's batch-1 rate that round, and the engine's ms per decode step and process
CPU ms per token over them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

import httpx
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.checkpoint import load_checkpoint
from bench.worker_bench import (
    PROMPTS,
    delta,
    load_transformers,
    server_stats,
    stream_times,
    transformers_decode_rate,
    transformers_generate,
    worker,
    worker_decode_rate,
)

WORKER_OPTIONS = ("--device", "cpu", "--max-batch", "8", "--context-length", "2048", "--weights-dtype", "fp32")
"""As bench/worker_bench.py starts its fp32 worker."""


async def worker_round(url: str, ids: list[int], tokens: int) -> tuple[float, float, int | None, float | None]:
    """(decode tok/s, engine ms per decode step, torch threads after it, worker process CPU ms per generated
    token) of one streamed request; None where the worker does not report it."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        before = await server_stats(client)
        rate = await worker_decode_rate(client, ids, tokens)
        after = await server_stats(client)
    done = delta(after, before)
    cpu = done["process_cpu_seconds"] / tokens * 1e3 if "process_cpu_seconds" in done else None
    return rate, done["decode_seconds"] / done["decode_steps"] * 1e3, after.get("threads"), cpu


async def concurrent_round(url: str, prompts: list[list[int]], tokens: int) -> tuple[float, float, float | None]:
    """(aggregate tok/s, engine ms per decode step, worker process CPU ms per token) of `prompts` streamed at once."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        before = await server_stats(client)
        began = time.perf_counter()
        results = await asyncio.gather(*(stream_times(client, ids, tokens) for ids in prompts))
        aggregate = sum(len(out) for _, out in results) / (time.perf_counter() - began)
        done = delta(await server_stats(client), before)
    generated = len(prompts) * tokens
    cpu = done["process_cpu_seconds"] / generated * 1e3 if "process_cpu_seconds" in done else None
    return aggregate, done["decode_seconds"] / done["decode_steps"] * 1e3, cpu


def print_concurrent(concurrent: dict[str, list[tuple[float, float, float | None]]], rates: dict[str, list[float]]):
    """The `--concurrent` table: medians over the rounds; the ratio is per round (the same worker's batch 1)."""
    print(
        "| engine | aggregate tok/s, median | min..max | x batch 1 (per round), median | engine step ms, median "
        "| worker CPU ms per token, median |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, runs in concurrent.items():
        aggregate = [a for a, _, _ in runs]
        ratio = statistics.median(a / r for a, r in zip(aggregate, rates[name]))
        cpu_ms = [c for _, _, c in runs if c is not None]
        cpu_cell = f"{statistics.median(cpu_ms):.2f}" if cpu_ms else "n/a"
        print(
            f"| {name} | {statistics.median(aggregate):.1f} | {min(aggregate):.1f}..{max(aggregate):.1f} | "
            f"{ratio:.2f}x | {statistics.median(s for _, s, _ in runs):.1f} | {cpu_cell} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True, help="the checkout whose worker is the baseline")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--auto", action="store_true", help="add this checkout's worker with --threads auto")
    parser.add_argument("--concurrent", type=int, default=0, help="also stream this many requests at once per round")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    checkpoint = load_checkpoint(None)
    prompts = [checkpoint.tokenizer.encode(p).ids for p in PROMPTS]
    model = load_transformers("cpu")
    transformers_generate(model, prompts[:1], 4, "cpu")
    engines = {
        f"worker baseline ({args.baseline})": (args.threads, args.baseline),
        "worker this checkout": (args.threads, ROOT),
    }
    if args.auto:
        engines["worker this checkout, --threads auto"] = ("auto", ROOT)
    load_before = os.getloadavg()
    with contextlib.ExitStack() as stack:
        urls = {
            name: stack.enter_context(worker("--threads", str(threads), *WORKER_OPTIONS, root=root))
            for name, (threads, root) in engines.items()
        }
        for url in urls.values():
            asyncio.run(worker_round(url, prompts[0], 4))  # warm-up
        rates: dict[str, list[float]] = {"transformers generate (fp32)": [], **{name: [] for name in urls}}
        steps: dict[str, list[float]] = {name: [] for name in urls}
        threads: dict[str, list[int | None]] = {name: [] for name in urls}
        cpu: dict[str, list[float | None]] = {name: [] for name in urls}
        concurrent: dict[str, list[tuple[float, float, float | None]]] = {name: [] for name in urls}
        for r in range(args.rounds):
            ids = prompts[r % len(prompts)]
            rates["transformers generate (fp32)"].append(transformers_decode_rate(model, ids, args.tokens, "cpu"))
            for name, url in urls.items():
                rate, step_ms, count, cpu_ms = asyncio.run(worker_round(url, ids, args.tokens))
                rates[name].append(rate)
                steps[name].append(step_ms)
                threads[name].append(count)
                cpu[name].append(cpu_ms)
                if args.concurrent:
                    batch = prompts[: args.concurrent]
                    concurrent[name].append(asyncio.run(concurrent_round(url, batch, args.tokens)))
                together = f", {args.concurrent} at once {concurrent[name][-1][0]:.1f} tok/s" if args.concurrent else ""
                print(f"round {r + 1}: {name}: batch 1 {rate:.1f} tok/s{together}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    hf = statistics.median(rates["transformers generate (fp32)"])
    print(
        f"rounds={args.rounds} new_tokens={args.tokens} threads={args.threads} torch={torch.__version__} "
        f"load average {load_before[0]:.2f} -> {load_after[0]:.2f} (1 min)"
    )
    print(
        "| engine | decode tok/s (batch 1), median | min..max | vs transformers | engine step ms, median "
        "| worker CPU ms per token, median | torch threads after each round |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, values in rates.items():
        step = f"{statistics.median(steps[name]):.1f}" if name in steps else "n/a"
        counts = " ".join(str(c) for c in threads[name]) if name in threads else str(args.threads)
        cpu_ms = [c for c in cpu.get(name, []) if c is not None]
        cpu_cell = f"{statistics.median(cpu_ms):.1f}" if cpu_ms else "n/a"
        print(
            f"| {name} | {statistics.median(values):.1f} | {min(values):.1f}..{max(values):.1f} | "
            f"{statistics.median(values) / hf:.2f}x | {step} | {cpu_cell} | {counts} |"
        )
    if args.concurrent:
        print_concurrent(concurrent, rates)


if __name__ == "__main__":
    main()
