"""What the strict-schema keyword check (gateway/grammars/unenforced.py) costs a request, before any grammar is built:
CPU ms per check of strict schemas of several shapes (median of --repeats).

    python bench/strict_schema_check_bench.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from family_grammar_bench import PARAMETERS

from gateway.grammars.unenforced import check_strict_schemas
from gateway.types import ChatRequest

USER = [{"role": "user", "content": "x"}]
SMALL = PARAMETERS


def kind(i: int) -> dict[str, Any]:
    return {"type": "object", "properties": {"kind": {"const": f"k{i}"}, "v": {"type": "string"}}, "required": ["kind"]}


def request(*schemas: dict[str, Any]) -> ChatRequest:
    tools = [
        {"type": "function", "function": {"name": f"t{i}", "parameters": s, "strict": True}}
        for i, s in enumerate(schemas)
    ]
    return ChatRequest(messages=USER, tools=tools)


CASES = [
    ("5 tools x 5 parameters", request(*[SMALL] * 5)),
    ("2,000 properties", request({"type": "object", "properties": {f"p{i}": SMALL for i in range(2000)}})),
    ("oneOf of 60 tagged objects (pairwise)", request({"type": "object", "properties": {"a": {"oneOf": [kind(i) for i in range(60)]}}})),
    ("oneOf of 2,000 tagged objects", request({"type": "object", "properties": {"a": {"oneOf": [kind(i) for i in range(2000)]}}})),
]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    print("load before:", Path("/proc/loadavg").read_text().strip())
    print("| strict schema | CPU ms per check |")
    print("|---|---:|")
    for name, chat in CASES:
        times = []
        for _ in range(args.repeats):
            started = time.process_time()
            check_strict_schemas(chat)
            times.append((time.process_time() - started) * 1000)
        print(f"| {name} | {statistics.median(times):.3f} |")
    print("load after:", Path("/proc/loadavg").read_text().strip())


if __name__ == "__main__":
    main()
