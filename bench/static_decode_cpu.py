"""CPU time of one decode step on the CPU, interleaved in one process: the engine's eager forward against the static
step a CUDA graph captures (`backends/worker/static_decode.py`: a bucket of slots 0..W-1, a key-length bucket, the
mask always), logits included in both. Whether the CPU could use the static step too: it keeps the eager path
unless this says the static one is as fast.

    python bench/static_decode_cpu.py [--threads 1] [--steps 20] [--rounds 5]

Cases: live rows in slots, at positions around 100 (the 128-key bucket). Prints the median process CPU ms per step
of each and their ratio, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.checkpoint import load_checkpoint
from backends.worker.model import LlamaModel
from backends.worker.static_decode import StaticDecoder
from backends.worker.weights import load_weights
from bench.worker_decode_cpu import cpu_and_wall

CASES = {"1 row, slot 0": [0], "1 row, slot 3": [3], "3 rows, slots 0-2": [0, 1, 2], "8 rows": list(range(8))}


def cpu_ms(run: Callable[[], None], steps: int) -> float:
    """Process CPU ms per call of `run`, over `steps` calls."""
    return cpu_and_wall(lambda: [run() for _ in range(steps)])[0] / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    checkpoint = load_checkpoint(None)
    model = LlamaModel(load_weights(checkpoint), checkpoint.config, slots=8, context=1024)
    decoder = StaticDecoder(model)
    results: dict[str, tuple[list[float], list[float]]] = {}
    for name, slots in CASES.items():
        first, top = slots[0], slots[-1] + 1
        assert slots == list(range(first, top))
        positions = [100 + 3 * i for i in range(len(slots))]
        tokens = [1000 + i for i in range(len(slots))]

        def eager(first=first, tokens=tokens, positions=positions) -> None:  # the live slots are contiguous
            column = lambda values: torch.tensor(values).unsqueeze(1)
            at = column(positions)
            model.logits(model.hidden(column(tokens), at, at, first, max(positions) + 1))

        step = decoder.step(top, max(positions) + 1)
        padding = first  # rows 0..first-1 idle in the static bucket
        rows = lambda values, idle, padding=padding: [idle] * padding + values

        def static(step=step, rows=rows, tokens=tokens, positions=positions) -> None:
            decoder.run(step, rows(tokens, 0), rows(positions, 0), rows(positions, model.cache.scratch_position))

        eager_ms, static_ms = [], []
        for _ in range(args.rounds):
            eager_ms.append(cpu_ms(eager, args.steps))
            static_ms.append(cpu_ms(static, args.steps))
        results[f"{name} (static width {step.width}, keys {step.key_len})"] = (eager_ms, static_ms)
    print(f"threads={args.threads} steps={args.steps} rounds={args.rounds} torch={torch.__version__}")
    print(f"load average {load:.2f} -> {os.getloadavg()[0]:.2f} (1 min)")
    print("| case | eager CPU ms per step, median | static CPU ms per step, median | static / eager |")
    print("|---|---:|---:|---:|")
    for name, (eager_ms, static_ms) in results.items():
        e, s = statistics.median(eager_ms), statistics.median(static_ms)
        print(f"| {name} | {e:.2f} | {s:.2f} | {s / e:.2f}x |")


if __name__ == "__main__":
    main()
