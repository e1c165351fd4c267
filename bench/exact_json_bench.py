"""Instructions per body parse of `backends/exact_json.py`'s `loads` (orjson's parse plus the check for integers
past 64 bits) against orjson's own, counted by callgrind in one process: a small chat body, 100 KB of text, 100 KB
of digits (a run of 19: the parsed value is walked for orjson's floats), 20,000 token ids. Each `--parses` times:

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/exact_json.%p \\
        .venv/bin/python bench/exact_json_bench.py [--parses 100] [--out /tmp/exact_json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from callgrind_counts import counted  # the bench folder is not a package: its path is added above

from backends.exact_json import loads

USER = {"role": "user", "content": "What is the weather in Paris?"}
BODIES = {
    "small chat": {"model": "m", "messages": [USER], "max_tokens": 64, "seed": 42},
    "100 KB text": {"model": "m", "messages": [{"role": "user", "content": "word " * 20_000}]},
    "100 KB digits": {"model": "m", "messages": [{"role": "user", "content": "1234567890" * 10_000}]},
    "20,000 token ids": {"model": "m", "prompt": list(range(20_000))},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parses", type=int, default=100)
    parser.add_argument("--out", default="/tmp/exact_json", help="callgrind's --callgrind-out-file, less its .%%p")
    args = parser.parse_args()
    dump = 0
    for name, value in BODIES.items():
        body = orjson.dumps(value)
        for label, parse in (("orjson.loads", orjson.loads), ("exact_json.loads", loads)):
            dump += 1
            total = counted(args.out, dump, lambda p=parse, b=body: [p(b) for _ in range(args.parses)])
            print(f"{name:17s} {len(body):7d} B  {label:17s} {total / args.parses:12,.0f} instructions per parse")


if __name__ == "__main__":
    main()
