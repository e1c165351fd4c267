"""CPU time per generated token of the worker's engine, in process: one request alone against N at once, and what
the engine thread spent it on.

    python bench/worker_batch_cpu.py [--threads 1] [--tokens 64] [--concurrent 8] [--rounds 3] [--split]

Issue #13 asks that N requests at once decode >= 5x the tokens/s of one. Over HTTP on a shared host wall-clock
rates swing; the engine thread's CPU time does not wait for other processes (with one torch thread it is the
work itself), so this measures the same ratio as CPU: a real `Engine` (its own thread, as the worker runs it),
greedy requests of `--tokens` tokens with `ignore_eos` (the `worker_bench.py` prompts), the engine thread's CPU
from the kernel's per-thread counter, and per part (timed on the engine thread): the prefill forwards, the decode
forwards, the greedy head / full logits with the token choice, and the rest (the engine's own Python). Each round
runs one request alone (prompts rotate), the N at once, and the N at once with the greedy head off (the full
float32 logits: what a CPU without a bfloat16 screen for several rows runs). The ratio is taken as the HTTP
benches take it: one request's CPU per decode token (its prefill left out, as `worker_bench.py`'s batch-1 rate
leaves out its first token) against the N requests' CPU per token with their prefill in (as the aggregate rate
has it). Prints medians, the load average before and after, and the greedy head in use.

`--split` also times, inside the decode forward, the layers' products and the attention calls (the rest of the
forward is its other ops: norms, RoPE, KV writes, the mask, residual adds), and inside the head part the bfloat16
screen (the rest: its float32 rescoring, or the full logits, and the per-row token hand-off). Each timed call costs
~1 us of clock reads (~150 a step), added to the forward's figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.base import SamplingParams
from backends.checkpoint import load_checkpoint
from backends.worker.engine import Engine, EngineEvent, EngineRequest
from backends.worker.model import LlamaModel
from backends.worker.weights import load_weights
from bench.worker_bench import PROMPTS

PARTS = ("prefill forward", "decode forward", "head and token choice")
SPLIT = {"decode: products": "decode forward", "decode: attention": "decode forward", "head: screen": PARTS[2]}
"""With `--split`: parts timed only while the part they belong to runs (the prefill's products are not the decode's)."""


def thread_cpu_seconds(native_id: int) -> float:
    """CPU seconds a thread of this process has run (the scheduler's nanosecond counter)."""
    return int(Path(f"/proc/self/task/{native_id}/schedstat").read_text().split()[0]) / 1e9


class PartClock:
    """CPU seconds of the calling thread spent inside wrapped callables, by part."""

    def __init__(self):
        self.seconds = dict.fromkeys([*PARTS, *SPLIT], 0.0)
        self.running: str | None = None
        """The outer part being timed now."""

    def wrap(self, part: str, function: Callable) -> Callable:
        """Time `function` as `part`: an outer part, or a part of SPLIT counted only inside its outer one."""
        within = SPLIT.get(part)

        def timed(*args, **kwargs):
            if within is not None and self.running != within:
                return function(*args, **kwargs)
            outer, began = self.running, time.thread_time()
            if within is None:
                self.running = part
            try:
                return function(*args, **kwargs)
            finally:
                self.running = outer
                self.seconds[part] += time.thread_time() - began

        return timed

    def split(self, model: LlamaModel) -> None:
        """Time the products and attention of `model`'s decode forward and its greedy head's screen."""
        for linear in (linear for layer in model.layers for linear in layer.linears):
            linear._matmul = self.wrap("decode: products", linear._matmul)
        F.scaled_dot_product_attention = self.wrap("decode: attention", F.scaled_dot_product_attention)
        if model.greedy_head is not None:
            model.greedy_head.screen = self.wrap("head: screen", model.greedy_head.screen)


def generate(engine: Engine, prompts: list[list[int]], tokens: int) -> int:
    """Submit `prompts` at once, greedy, and wait until all have finished; the number of tokens generated."""
    done = threading.Semaphore(0)
    counts = [0] * len(prompts)

    def emit(i: int) -> Callable[[EngineEvent], None]:
        def on_event(event: EngineEvent) -> None:
            counts[i] += len(event.tokens)
            if event.finish is not None:
                done.release()

        return on_event

    for i, ids in enumerate(prompts):
        params = SamplingParams(tokens, temperature=0.0, ignore_eos=True)
        engine.submit(EngineRequest(f"r{time.monotonic_ns()}-{i}", ids, params, emit=emit(i)))
    for _ in prompts:
        done.acquire()
    return sum(counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--split", action="store_true", help="time the decode's products, attention, head screen")
    args = parser.parse_args()
    torch.set_num_threads(1)
    checkpoint = load_checkpoint(None)
    model = LlamaModel(load_weights(checkpoint), checkpoint.config, slots=args.concurrent, context=2048)
    clock = PartClock()
    model.prefill = clock.wrap("prefill forward", model.prefill)
    model.hidden = clock.wrap("decode forward", model.hidden)
    engine = Engine(model, [], prefix_cache=False, threads=args.threads)
    engine._sample_and_emit = clock.wrap("head and token choice", engine._sample_and_emit)
    if args.split:
        clock.split(model)
    engine.start()
    engine_thread = engine._thread.native_id
    prompts = [checkpoint.tokenizer.encode(p).ids for p in PROMPTS]
    together = [prompts[i % len(prompts)] for i in range(args.concurrent)]
    head = model.greedy_head

    def run(batch: list[list[int]], screen: bool) -> dict[str, float]:
        model.greedy_head = head if screen else None
        before, parts = thread_cpu_seconds(engine_thread), dict(clock.seconds)
        generated = generate(engine, batch, args.tokens)
        spent = {part: clock.seconds[part] - parts[part] for part in clock.seconds}
        spent["all"] = thread_cpu_seconds(engine_thread) - before
        spent["rest"] = spent["all"] - sum(spent[part] for part in PARTS)
        spent["decode: other ops"] = spent["decode forward"] - spent["decode: products"] - spent["decode: attention"]
        return {part: seconds / generated for part, seconds in spent.items()}

    cases = {
        "1 request": lambda r: run([prompts[r % len(prompts)]], True),
        f"{args.concurrent} at once": lambda r: run(together, True),
        f"{args.concurrent} at once, greedy head off": lambda r: run(together, False),
    }
    run(prompts[:1], True)  # warm-up
    load_before = os.getloadavg()[0]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    for r in range(args.rounds):
        for name, case in cases.items():
            results[name].append(case(r))
    engine.stop()
    print(
        f"threads={args.threads} tokens={args.tokens} rounds={args.rounds} torch={torch.__version__} "
        f"dispatch={torch.backends.cpu.get_cpu_capability()} greedy head: "
        f"{head.describe() if head is not None else 'none'}; load average {load_before:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    split = ("decode: products", "decode: attention", "decode: other ops", "head: screen") if args.split else ()
    columns = ("all", *PARTS, "rest", *split)
    print("| case | " + " | ".join(f"engine CPU ms per token: {c}" for c in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    medians = {
        name: {c: statistics.median(v[c] for v in values) * 1e3 for c in columns} for name, values in results.items()
    }
    for name, row in medians.items():
        print(f"| {name} | " + " | ".join(f"{row[c]:.2f}" for c in columns) + " |")
    alone = medians["1 request"]
    alone_decode = (alone["all"] - alone["prefill forward"]) * args.tokens / (args.tokens - 1)
    for name in list(medians)[1:]:
        print(f"{name}: {alone_decode / medians[name]['all']:.2f}x one request's CPU per decode token")


if __name__ == "__main__":
    main()
