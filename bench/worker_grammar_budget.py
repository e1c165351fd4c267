"""What the worker's grammar compile budget costs a cache miss, and what it saves on a hostile schema: small
distinct schemas compiled in process (budget 0) against checked in a compile child first (budget 2, the default),
alternated; then twelve nested anyOf levels (7.2 CPU-s to compile unbounded) refused past the budget, and again.

    python bench/worker_grammar_budget.py [--schemas 20] [--rounds 3] [--budget 2]

Prints a table (median round; wall ms per miss and this process's CPU ms: a child's CPU is not in it) and the load
average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.checkpoint import load_checkpoint
from backends.worker.grammar import GrammarCache, GrammarTooComplex, tokenizer_info


def nested_any_of(levels: int) -> str:
    node: dict = {"type": "string"}
    for i in range(levels):
        node = {"anyOf": [{"type": "object", "properties": {f"k{i}": node}}, {"type": "array", "items": node}]}
    return json.dumps({"type": "object", "properties": {"a": node}})


def small(i: int) -> str:
    properties = {f"f{i}": {"type": "string"}, "n": {"type": "integer"}}
    return json.dumps({"type": "object", "properties": properties, "required": [f"f{i}"]})


def load() -> str:
    return Path("/proc/loadavg").read_text().strip()


def cpu() -> float:
    times = os.times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schemas", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=2.0)
    args = parser.parse_args()
    print("load before:", load())
    checkpoint = load_checkpoint(None)
    info = tokenizer_info(checkpoint, checkpoint.config.vocab_size)
    budgeted = GrammarCache(info, budget_s=args.budget)
    caches = {"in process (budget 0)": GrammarCache(info), f"child first (budget {args.budget:g})": budgeted}
    budgeted.compile("json_schema", small(-1))  # the first child forks outside the timing
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in caches}
    serial = 0
    for _ in range(args.rounds):
        for name, cache in caches.items():
            wall, spent = time.perf_counter(), cpu()
            for _ in range(args.schemas):
                serial += 1
                cache.compile("json_schema", small(serial))
            figures[name].append(((time.perf_counter() - wall) * 1000, (cpu() - spent) * 1000))
    print("| miss | wall ms per miss | this process's CPU ms per miss |\n|---|---:|---:|")
    for name, runs in figures.items():
        wall = statistics.median(w for w, _ in runs) / args.schemas
        spent = statistics.median(c for _, c in runs) / args.schemas
        print(f"| {name} | {wall:.1f} | {spent:.1f} |")
    for label in ("nested anyOf x12", "nested anyOf x12 again"):
        wall = time.perf_counter()
        try:
            budgeted.compile("json_schema", nested_any_of(12))
            outcome = "compiled"
        except GrammarTooComplex:
            outcome = "refused"
        print(f"| {label} | {outcome} after {time.perf_counter() - wall:.2f} s wall | |")
    budgeted.close()
    print("load after:", load())


if __name__ == "__main__":
    main()
