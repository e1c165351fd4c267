"""Batch-1 decode steps by which thread loaded the model and which runs the steps (one process per placement).

    python bench/worker_thread_placement.py [--rounds 6] [--steps 48] [--threads 2]

Each placement runs in a fresh process: the model is loaded (with `--threads` torch threads, or one) on the main
thread or on another, and `--steps` greedy decode steps after a 200-token prompt are timed on the main thread or on
another, `--rounds` times (the first dropped as warm-up). Prints the median ms per step of each placement and the
load average. It shows why the worker's main thread loads on one torch thread (backends/worker/__main__.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLACEMENTS = {
    "main": "loaded and run on the main thread",
    "load-main-run-thread": "loaded on the main thread, run on another",
    "thread": "loaded and run on another thread",
    "load1-main-run-thread": "loaded on the main thread with 1 torch thread, run on another",
}


def _steps(placement: str, rounds: int, steps: int, threads: int) -> list[float]:
    """Seconds per step of each round but the first, for `placement` (runs in the child process)."""
    import torch

    sys.path.insert(0, str(ROOT))
    from backends.checkpoint import embedded_gguf_path, load_checkpoint
    from backends.worker.model import LlamaModel
    from backends.worker.weights import load_weights

    def load():
        torch.set_num_threads(1 if placement == "load1-main-run-thread" else threads)
        checkpoint = load_checkpoint(embedded_gguf_path())
        return LlamaModel(load_weights(checkpoint, lambda *_: None), checkpoint.config, slots=1, context=2048)

    def run(model) -> list[float]:
        torch.set_num_threads(threads)
        prompt = list(range(100, 300))
        times = []
        for _ in range(rounds):
            ids, pos = torch.tensor([prompt]), torch.arange(len(prompt)).unsqueeze(0)
            hidden = model.hidden(ids, pos, pos, 0, len(prompt))
            began = time.perf_counter()
            for i in range(steps):
                token = model.greedy_head.tokens(hidden) if model.greedy_head else None
                token = token[0] if token else int(model.logits(hidden).argmax(-1)[0])
                at = torch.tensor([[len(prompt) + i]])
                hidden = model.hidden(torch.tensor([[token]]), at, at, 0, len(prompt) + i + 1)
            times.append((time.perf_counter() - began) / steps)
        return times[1:]

    box: list[list[float]] = []
    if placement == "main":
        return run(load())
    if placement == "thread":
        worker = threading.Thread(target=lambda: box.append(run(load())))
    else:
        model = load()
        worker = threading.Thread(target=lambda: box.append(run(model)))
    worker.start()
    worker.join()
    return box[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", choices=sorted(PLACEMENTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(" ".join(f"{t:.6f}" for t in _steps(args.child, args.rounds, args.steps, args.threads)))
        return
    print(f"load average {os.getloadavg()[0]:.2f} before")
    print("| placement | ms per batch-1 step, median | rounds |")
    print("|---|---:|---|")
    for placement, said in PLACEMENTS.items():
        out = subprocess.run(
            [sys.executable, __file__, "--child", placement, *_passed(args)], capture_output=True, text=True, check=True
        ).stdout.split()
        times = [float(t) * 1e3 for t in out]
        print(f"| {said} | {statistics.median(times):.1f} | {' '.join(f'{t:.1f}' for t in times)} |")
    print(f"load average {os.getloadavg()[0]:.2f} after")


def _passed(args: argparse.Namespace) -> list[str]:
    return ["--rounds", str(args.rounds), "--steps", str(args.steps), "--threads", str(args.threads)]


if __name__ == "__main__":
    main()
