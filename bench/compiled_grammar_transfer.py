"""Could the worker compile a grammar miss once? Its compile child checks the grammar under the budget, then the
worker compiles it again in process, because a compiled grammar cannot be handed over but as xgrammar 0.2.9's
JSON (`CompiledGrammar.serialize_json` / `deserialize_json`, the only form it has; no pickling). This compares,
per grammar, a second compile against serializing in the child and deserializing in the worker (the pipe's copy
of the JSON not counted), on the embedded model's vocabulary, one thread, no cache.

    python bench/compiled_grammar_transfer.py [--repeats 3]

Prints a table of CPU ms (median of the repeats), the JSON's size and xgrammar's memory_size_bytes, and the load
average before and after.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import xgrammar as xgr

from backends.checkpoint import load_checkpoint
from backends.worker.grammar import tokenizer_info
from backends.xgrammar_compile import compile_grammar


def one_object() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["city"],
    }


def five_objects() -> dict[str, Any]:
    kinds = ["string", "integer", "boolean", "number", "string"]
    members = {f"p{j}": {"type": t} for j, t in enumerate(kinds)}
    tool = {"type": "object", "properties": members, "required": list(members)}
    return {"type": "object", "properties": {f"t{k}": tool for k in range(5)}}


def enum(n: int) -> dict[str, Any]:
    return {"type": "object", "properties": {"a": {"enum": [f"value_{i}_x" for i in range(n)]}}}


def nested_any_of(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for i in range(levels):
        node = {"anyOf": [{"type": "object", "properties": {f"k{i}": node}}, {"type": "array", "items": node}]}
    return {"type": "object", "properties": {"a": node}}


CASES: list[tuple[str, Callable[[], dict[str, Any]]]] = [
    ("one object, 2 members", one_object),
    ("5 objects x 5 members", five_objects),
    ("enum of 2,000", lambda: enum(2000)),
    ("enum of 8,000", lambda: enum(8000)),
    ("4 nested anyOf", lambda: nested_any_of(4)),
    ("6 nested anyOf", lambda: nested_any_of(6)),
]


def cpu_ms(work: Callable[[], Any]) -> tuple[float, Any]:
    started = time.process_time()
    result = work()
    return (time.process_time() - started) * 1000, result


def load() -> str:
    return Path("/proc/loadavg").read_text().strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("load before:", load())
    checkpoint = load_checkpoint(None)
    info = tokenizer_info(checkpoint, checkpoint.config.vocab_size)
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    print("| grammar | compile again ms | serialize ms | deserialize ms | JSON KB | memory_size KB |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, schema in CASES:
        text = json.dumps(schema())
        runs = []
        for _ in range(args.repeats):
            compiled_ms, compiled = cpu_ms(lambda t=text: compile_grammar(compiler, "json_schema", t))
            serialize_ms, blob = cpu_ms(compiled.serialize_json)
            deserialize_ms, _ = cpu_ms(lambda b=blob: xgr.CompiledGrammar.deserialize_json(b, info))
            runs.append((compiled_ms, serialize_ms, deserialize_ms))
        compiled_ms, serialize_ms, deserialize_ms = (statistics.median(column) for column in zip(*runs))
        print(
            f"| {name} | {compiled_ms:,.1f} | {serialize_ms:,.1f} | {deserialize_ms:,.1f} | {len(blob) / 1024:,.0f} "
            f"| {compiled.memory_size_bytes / 1024:,.0f} |"
        )
    print("load after:", load())


if __name__ == "__main__":
    main()
