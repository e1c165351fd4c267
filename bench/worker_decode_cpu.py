"""CPU time per batch-1 decode token, in one process, interleaved: transformers `generate` against the worker's model
with the full float32 logits and with its greedy head (the bfloat16 screen).

    python bench/worker_decode_cpu.py [--threads 1] [--tokens 32] [--rounds 5]

Process CPU seconds hold up better than wall time on a shared host (a waiting thread is not charged); with one
thread they count the work itself. Each round decodes `--tokens` greedy tokens of one prompt with each engine in
turn (prompts rotate); transformers' figure is `generate(tokens)` less `generate(1)`. Prints medians, the ratio
to transformers, wall time beside it, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.checkpoint import load_checkpoint
from backends.worker.model import LlamaModel
from backends.worker.weights import load_weights
from bench.worker_bench import PROMPTS, load_transformers, transformers_generate


def cpu_and_wall(run: Callable[[], object]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    return time.process_time() - cpu, time.perf_counter() - wall


def worker_decode(model: LlamaModel, ids: list[int], tokens: int, screen: bool) -> None:
    """Prefill `ids` into slot 0, then `tokens - 1` greedy decode steps (the head's choice, else the full argmax)."""
    positions = torch.arange(len(ids)).unsqueeze(0)
    hidden = model.hidden(torch.tensor([ids]), positions, positions, 0, len(ids))
    for position in range(len(ids), len(ids) + tokens - 1):
        chosen = model.greedy_head.tokens(hidden) if screen and model.greedy_head is not None else None
        token = chosen[0] if chosen else int(model.logits(hidden).argmax())
        at = torch.tensor([[position]])
        hidden = model.hidden(torch.tensor([[token]]), at, at, 0, position + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    checkpoint = load_checkpoint(None)
    model = LlamaModel(load_weights(checkpoint), checkpoint.config, slots=1, context=1024)
    hf = load_transformers("cpu")
    prompts = [checkpoint.tokenizer.encode(p).ids for p in PROMPTS]
    n = args.tokens

    def per_token_hf(ids: list[int]) -> tuple[float, float]:
        full = cpu_and_wall(lambda: transformers_generate(hf, [ids], n, "cpu"))
        first = cpu_and_wall(lambda: transformers_generate(hf, [ids], 1, "cpu"))
        return (full[0] - first[0]) / (n - 1), (full[1] - first[1]) / (n - 1)

    def per_token_worker(screen: bool) -> Callable[[list[int]], tuple[float, float]]:
        def run(ids: list[int]) -> tuple[float, float]:
            cpu, wall = cpu_and_wall(lambda: worker_decode(model, ids, n, screen))
            return cpu / (n - 1), wall / (n - 1)  # the prefill is a small share of 1 + (n - 1) forwards

        return run

    engines = {
        "transformers generate (fp32)": per_token_hf,
        "worker model, full float32 logits": per_token_worker(False),
        "worker model, greedy head": per_token_worker(True),
    }
    for measure in engines.values():
        measure(prompts[0])  # warm-up
    load_before = os.getloadavg()[0]
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in engines}
    for r in range(args.rounds):
        for name, measure in engines.items():
            results[name].append(measure(prompts[r % len(prompts)]))
    load_after = os.getloadavg()[0]
    base = statistics.median(cpu for cpu, _ in results["transformers generate (fp32)"])
    print(f"threads={args.threads} tokens={n} rounds={args.rounds} load average {load_before:.2f} -> {load_after:.2f}")
    print("| engine | CPU ms per decode token, median | vs transformers (CPU) | wall ms per token, median |")
    print("|---|---:|---:|---:|")
    for name, values in results.items():
        cpu = statistics.median(c for c, _ in values)
        wall = statistics.median(w for _, w in values)
        print(f"| {name} | {cpu * 1e3:.1f} | {base / cpu:.2f}x | {wall * 1e3:.1f} |")
    if model.greedy_head is not None:
        head = model.greedy_head
        print(f"greedy head: {head.chosen} rows chosen, {head.fallbacks} handed back to the full logits")


if __name__ == "__main__":
    main()
