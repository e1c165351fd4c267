"""CPU cost of the schema fold (`all_of.folded_all_of`) and the strict check (`unenforced.unenforced_keywords`) on
schemas with and without keywords beside an `anyOf` / `oneOf`: the fold runs before every JSON grammar's
conversion, the check before every strict build. Run it against two trees (PYTHONPATH) to compare.

    PYTHONPATH=$PWD .venv/bin/python bench/union_fold_bench.py [--repeat N]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from gateway.grammars.all_of import folded_all_of
from gateway.grammars.unenforced import unenforced_keywords


def _wide(n: int) -> dict[str, Any]:
    """A tool of `n` parameters of every kind, nested objects and arrays, Optional fields as pydantic writes them."""
    properties: dict[str, Any] = {}
    for i in range(n):
        properties[f"s{i}"] = {"type": "string", "maxLength": 40, "description": "x"}
        properties[f"o{i}"] = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}], "default": None}
        properties[f"a{i}"] = {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"k": {"type": "string", "enum": ["a", "b"]}, "v": {"type": "number"}},
                "required": ["k"],
            },
        }
    return {"type": "object", "properties": properties, "required": [f"s{i}" for i in range(n)]}


def _siblings(n: int) -> dict[str, Any]:
    """`_wide(n)` with each Optional's bound beside its union and the object's alternatives beside an anyOf."""
    schema = _wide(n)
    for i in range(n):
        schema["properties"][f"o{i}"] = {"anyOf": [{"type": "integer"}, {"type": "null"}], "minimum": 0}
    schema["additionalProperties"] = False
    schema["anyOf"] = [{"required": ["o0"]}, {"required": ["a0"]}]
    return schema


SCHEMAS = {"no siblings, 30x3 params": _wide(30), "no siblings, 300x3 params": _wide(300),
           "siblings, 30x3 params": _siblings(30), "siblings, 300x3 params": _siblings(300)}  # fmt: skip


def _cpu_ms(call: Any, repeat: int) -> float:
    start = time.process_time()
    for _ in range(repeat):
        call()
    return (time.process_time() - start) / repeat * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print("| schema | fold CPU ms | strict check CPU ms |\n|---|---|---|")
    for name, schema in SCHEMAS.items():
        repeat = args.repeat if "30x" in name else max(1, args.repeat // 10)
        fold = _cpu_ms(lambda s=schema: folded_all_of(s, "p"), repeat)
        check = _cpu_ms(lambda s=schema: unenforced_keywords(s, "p"), repeat)
        print(f"| {name} | {fold:.3f} | {check:.3f} |")


if __name__ == "__main__":
    main()
