"""xgrammar's import in a process that has torch (the bundled worker's case): the whole package against
backends/xgrammar_core.py's `without_transformers()` load (the compiler and matcher, transformers a stand-in).

    python bench/worker_xgrammar_import.py [--runs 5]

Each load in a fresh child process, the two interleaved; prints each load's CPU seconds and resident memory added,
and whether transformers was imported.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import sys, time
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
import torch
from backends.xgrammar_core import without_transformers, xgrammar
cpu, mb = time.process_time(), rss()
if sys.argv[1] == "partial":  # the worker's start: the compiler, the matcher and the bitmask functions
    without_transformers()
xgrammar()
print(time.process_time() - cpu, rss() - mb, "transformers" in sys.modules)
"""
LOADS = {"whole": "whole package", "partial": "compiler + matcher, transformers a stand-in"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rows: dict[str, list[tuple[float, float, str]]] = {load: [] for load in LOADS}
    for _ in range(args.runs):
        for load in LOADS:
            done = subprocess.run(
                [sys.executable, "-c", CHILD, load], cwd=ROOT, capture_output=True, text=True, check=True
            )
            cpu, mb, transformers = done.stdout.split()
            rows[load].append((float(cpu), float(mb), transformers))
    print(f"| load (median of {args.runs}) | CPU s | RSS MB | transformers imported |")
    print("|---|---:|---:|---|")
    for load, runs in rows.items():
        cpu, mb = (statistics.median(r[i] for r in runs) for i in (0, 1))
        print(f"| {LOADS[load]} | {cpu:.3f} | {mb:.1f} | {runs[0][2]} |")


if __name__ == "__main__":
    main()
