"""CPU time of one grammar step's mask on the CPU (`BatchMasker.apply`), interleaved in one process: the rows whose
grammar allows no token decided from the host bitmask (the worker's way) against reading the masked logits (its
former way: on CUDA a device sync every grammar step). Both fill the bitmask and mask the logits alike.

    python bench/grammar_mask_check.py [--steps 200] [--rounds 5]

Rows: n rows of the embedded model's vocabulary (49,152), each under a JSON grammar at its start. Prints the median
process CPU µs per step of each, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import xgrammar as xgr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.checkpoint import load_checkpoint
from backends.worker.grammar import BatchMasker, GrammarCache, tokenizer_info


class LogitsReadingMasker(BatchMasker):
    """The former decision: the masked logits read back (`isfinite` over the rows)."""

    def _allowing_none(self, rows: list[int]) -> list[int]:
        return []  # decided in apply, after the masking

    def apply(self, logits: torch.Tensor, matchers: list) -> list[int]:
        rows = [i for i, m in enumerate(matchers) if m is not None]
        super().apply(logits, matchers)
        allowed = logits[rows].isfinite().any(dim=-1).tolist()
        return [i for i, some in zip(rows, allowed) if not some]


def cpu_us(masker: BatchMasker, logits: torch.Tensor, matchers: list, steps: int) -> float:
    began = time.process_time()
    for _ in range(steps):
        masker.apply(logits, matchers)
    return (time.process_time() - began) / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    checkpoint = load_checkpoint(None)
    vocab = len(checkpoint.vocab)
    compiled = GrammarCache(tokenizer_info(checkpoint, vocab)).compile("json_schema", '{"type": "object"}')
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print("| rows | host bitmask µs/step | masked logits read µs/step | saved |")
    print("|---:|---:|---:|---:|")
    for rows in (1, 8):
        matchers = [xgr.GrammarMatcher(compiled) for _ in range(rows)]
        logits = torch.randn(rows, vocab)
        maskers = {"bitmask": BatchMasker(rows, vocab), "logits": LogitsReadingMasker(rows, vocab)}
        times: dict[str, list[float]] = {name: [] for name in maskers}
        for _ in range(args.rounds):
            for name, masker in maskers.items():
                times[name].append(cpu_us(masker, logits, matchers, args.steps))
        new, old = (statistics.median(times[name]) for name in ("bitmask", "logits"))
        print(f"| {rows} | {new:.1f} | {old:.1f} | {old - new:.1f} |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
