"""The worker's layer products through each CPU linear path torch offers, on this CPU: CPU time per sweep of all
layers' four products (the weights stream from memory as in a real step), one thread, paths rotated each round.

    python bench/worker_linear_paths.py [--rows 1 8 64 256] [--rounds 12] [--hints 16]

Paths: oneDNN's packed float32 weights as the worker packs them (no batch-size hint), the same packed for a
batch-size hint, MKL's packed weights for exactly M rows (`torch.ops.mkl._mkl_linear`, at the decode row counts
only), and ATen's `F.linear` (MKL sgemm/sgemv). The starting path of each round rotates (the first and last in a
round ran slower under load when fixed). Prints the median per path and row count, its ratio to the worker's, and
the largest difference from the worker's output. Run it under `ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
MKL_ENABLE_INSTRUCTIONS=AVX2` to see an AVX2-only CPU's kernels.
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
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.checkpoint import load_checkpoint
from backends.worker.model import layer_products
from backends.worker.weights import load_weights

Product = Callable[[torch.Tensor, int], torch.Tensor]
MKL_PACKED_ROWS = 8
"""MKL's packed weights are packed for one row count; timed only up to this many rows (one copy per count)."""


def onednn(packed: list[torch.Tensor]) -> Product:
    return lambda x, i: torch.ops.mkldnn._linear_pointwise(x, packed[i], None, "none", [], "")


def paths(weights: list[torch.Tensor], rows: int, hints: list[int]) -> dict[str, Product]:
    found: dict[str, Product] = {
        "oneDNN packed (worker)": onednn([torch.ops.mkldnn._reorder_linear_weight(w) for w in weights])
    }
    for hint in hints:
        packed = [torch.ops.mkldnn._reorder_linear_weight(w, hint) for w in weights]
        found[f"oneDNN packed for {hint} rows"] = onednn(packed)
    if rows <= MKL_PACKED_ROWS:
        mkl = [torch.ops.mkl._mkl_reorder_linear_weight(w, rows) for w in weights]
        found[f"MKL packed for {rows} rows"] = lambda x, i: torch.ops.mkl._mkl_linear(x, mkl[i], weights[i], None, rows)
    found["ATen F.linear"] = lambda x, i: F.linear(x, weights[i])
    return found


def sweep_cpu(product: Product, inputs: list[torch.Tensor]) -> float:
    began = time.process_time()
    for i, x in enumerate(inputs):
        product(x, i)
    return time.process_time() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--hints", type=int, nargs="*", default=[16], help="batch-size hints for oneDNN's packing")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    checkpoint = load_checkpoint(None)
    weights = [w.contiguous() for layer in load_weights(checkpoint).layers for w in layer_products(layer)]
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "default")
    print(
        f"ATen {torch.backends.cpu.get_cpu_capability()}, ONEDNN_MAX_CPU_ISA={isa}, threads={args.threads}, "
        f"{len(weights)} products, load average {os.getloadavg()[0]:.2f}"
    )
    print("| rows | path | CPU ms per sweep, median | vs worker's | max difference from worker's |")
    print("|---:|---|---:|---:|---:|")
    with torch.inference_mode():
        for rows in args.rows:
            found = paths(weights, rows, args.hints)
            inputs = [torch.randn(rows, w.shape[1]) for w in weights]
            names = list(found)
            times: dict[str, list[float]] = {name: [] for name in names}
            for name in names:
                sweep_cpu(found[name], inputs)  # warm-up
            for r in range(args.rounds):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    times[name].append(sweep_cpu(found[name], inputs))
            reference = [found[names[0]](x, i) for i, x in enumerate(inputs)]
            base = statistics.median(times[names[0]])
            for name in names:
                diff = max(float((found[name](x, i) - reference[i]).abs().max()) for i, x in enumerate(inputs))
                median = statistics.median(times[name])
                print(f"| {rows} | {name} | {median * 1e3:.2f} | {median / base:.2f}x | {diff:.1e} |")
            del found
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
