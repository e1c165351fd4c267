"""Prefill of the worker's model with each GEMM against transformers, in one process, interleaved.

    python bench/worker_prefill.py [--threads 2] [--lengths 500 2000] [--rounds 3] [--chunk 256]

Each round prefills one prompt of each length with transformers (one forward, as `generate` does), with the
worker's model in `--chunk`-token chunks (as its engine does) on oneDNN's packed weights for every product, and
the same with ATen for products of >= 64 rows (`--prefill-gemm aten`). Prints the median tokens/s (wall) and CPU
seconds, the ratio to transformers, what `--prefill-gemm auto` chooses on this CPU (its start-up timings) and the
load average before and after. Run it again under `ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
MKL_ENABLE_INSTRUCTIONS=AVX2` to see an AVX2-capped CPU.
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
from backends.worker.model import LlamaModel, layer_products
from backends.worker.prefill_gemm import FORCED_ATEN_FROM, choose_prefill_gemm
from backends.worker.threads import describe_cpus
from backends.worker.weights import load_weights
from bench.worker_bench import PROMPTS, load_transformers
from bench.worker_decode_cpu import cpu_and_wall


def worker_prefill(model: LlamaModel, ids: list[int], chunk: int) -> None:
    for start in range(0, len(ids), chunk):
        part = ids[start : start + chunk]
        positions = torch.arange(start, start + len(part)).unsqueeze(0)
        model.hidden(torch.tensor([part]), positions, positions, 0, start + len(part))


def route_to_aten(model: LlamaModel, aten_from: int | None) -> None:
    """Products of >= `aten_from` rows to ATen (the model keeps float32 weights); None: oneDNN for all."""
    for layer in model.layers:
        for linear in layer.linears:
            linear.aten_from = aten_from if aten_from is not None else sys.maxsize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lengths", type=int, nargs="+", default=[500, 2000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    checkpoint = load_checkpoint(None)
    weights = load_weights(checkpoint)
    auto = choose_prefill_gemm("auto", layer_products(weights.layers[0]), args.chunk)
    model = LlamaModel(weights, checkpoint.config, slots=1, context=max(args.lengths), aten_from=FORCED_ATEN_FROM)
    hf = load_transformers("cpu")
    text = checkpoint.tokenizer.encode(" ".join(PROMPTS)).ids
    prompts = {n: (text * (n // len(text) + 1))[:n] for n in args.lengths}

    def transformers_prefill(ids: list[int]) -> None:
        with torch.inference_mode():
            hf(torch.tensor([ids]))

    def worker(aten_from: int | None) -> Callable[[list[int]], None]:
        def run(ids: list[int]) -> None:
            route_to_aten(model, aten_from)
            worker_prefill(model, ids, args.chunk)

        return run

    engines = {
        "transformers forward (fp32)": transformers_prefill,
        "worker, oneDNN for every product": worker(None),
        f"worker, ATen for >= {FORCED_ATEN_FROM} rows": worker(FORCED_ATEN_FROM),
    }
    for run in engines.values():
        run(prompts[min(args.lengths)])  # warm-up
    load_before = os.getloadavg()[0]
    results = {(name, n): [] for name in engines for n in args.lengths}
    for _ in range(args.rounds):
        for n, ids in prompts.items():
            for name, run in engines.items():
                results[name, n].append(cpu_and_wall(lambda run=run, ids=ids: run(ids)))
    load_after = os.getloadavg()[0]
    print(
        f"threads={args.threads} chunk={args.chunk} rounds={args.rounds} torch={torch.__version__} "
        f"dispatch={torch.backends.cpu.get_cpu_capability()} ({describe_cpus()}) load average {load_before:.2f} -> "
        f"{load_after:.2f}"
    )
    print(auto.describe(0.0).replace("+0 MB", "+ float32 weights"))
    print("| engine | prompt tokens | tok/s (wall), median | vs transformers | CPU s, median | vs transformers (CPU) |")
    print("|---|---:|---:|---:|---:|---:|")
    for n in args.lengths:
        base_wall = statistics.median(w for _, w in results["transformers forward (fp32)", n])
        base_cpu = statistics.median(c for c, _ in results["transformers forward (fp32)", n])
        for name in engines:
            wall = statistics.median(w for _, w in results[name, n])
            cpu = statistics.median(c for c, _ in results[name, n])
            print(f"| {name} | {n} | {n / wall:.0f} | {base_wall / wall:.2f}x | {cpu:.2f} | {base_cpu / cpu:.2f}x |")


if __name__ == "__main__":
    main()
