"""What the strict check (`unenforced_keywords`) costs on listed values beside a `pattern`, and whether every literal
schema in tests/ keeps its JSON value grammar byte for byte.

Cost: CPU seconds (and wall) of `unenforced_keywords` on three schemas, the least of --rounds: three values beside
a pattern; 20,000 beside one; 128 properties each with a hostile pattern (`^(a|a)*$` against 60 `a`s and a `!`).
With --hashes FILE, every dict literal in tests/*.py that looks like a schema gets its `json_value_ebnf` (best effort,
strict, exact) hashed into FILE: run it on two trees and compare the files (`--compare A B` lists the schemas whose
grammar or refusal differs).

    PYTHONPATH=<tree> python bench/listed_pattern_bench.py [--rounds 3] [--hashes out.json] [--compare A B]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPELLINGS = ("<|im_end|>", "[TOOL_CALLS]")
_SCHEMA_KEYS = {"type", "properties", "anyOf", "oneOf", "allOf", "enum", "const", "$ref", "items", "$defs", "pattern"}


def cases() -> dict[str, dict[str, Any]]:
    few = {"type": "string", "enum": ["ab", "b", "ac"], "pattern": "^a"}
    many = {"type": "string", "enum": [f"v{i:05d}x" for i in range(20_000)], "pattern": "^v0[0-9]+x$"}
    hostile = {f"k{j}": {"enum": ["a" * 60 + "!", "a"], "pattern": "^(a|a)*$"} for j in range(128)}
    return {
        "3 values": {"type": "object", "properties": {"k": few}},
        "20,000 values": {"type": "object", "properties": {"k": many}},
        "128 hostile": {"type": "object", "properties": hostile},
    }


def costs(rounds: int) -> None:
    from gateway.grammars.unenforced import unenforced_keywords

    for name, schema in cases().items():
        runs = []
        for _ in range(rounds):
            cpu, wall = time.process_time(), time.monotonic()
            found = unenforced_keywords(schema, "p")
            runs.append((time.process_time() - cpu, time.monotonic() - wall))
        print(f"{name}: CPU {min(r[0] for r in runs):.4f} s, wall {min(r[1] for r in runs):.4f} s, found {len(found)}")


def literal_schemas() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Dict):
                continue
            try:
                value = ast.literal_eval(node)
                text = json.dumps(value)
            except (ValueError, TypeError, SyntaxError, RecursionError):
                continue
            if isinstance(value, dict) and value.keys() & _SCHEMA_KEYS:
                schemas[text] = value
    return schemas


def hashes(out: Path) -> None:
    from gateway.grammars.safe_json import json_value_ebnf

    found = {}
    for text, schema in literal_schemas().items():
        for strict, exact in ((False, False), (True, False), (True, True)):
            try:
                ebnf = json_value_ebnf(schema, SPELLINGS, "p", strict, exact=exact)
                verdict = "none" if ebnf is None else hashlib.sha256(ebnf.encode()).hexdigest()[:16]
            except Exception as exc:  # noqa: BLE001  (a refusal is a result to compare)
                verdict = f"{type(exc).__name__} {getattr(exc, 'param', '')}"
            found[f"{strict}/{exact} {text}"] = verdict
    out.write_text(json.dumps(found, indent=0))
    print(f"{len(found)} grammars hashed into {out}")


def compare(a: Path, b: Path) -> None:
    first, second = json.loads(a.read_text()), json.loads(b.read_text())
    differ = [k for k in first.keys() & second.keys() if first[k] != second[k]]
    print(f"{len(first.keys() & second.keys())} compared, {len(differ)} differ")
    for key in sorted(differ):
        print(f"  {key[:160]}\n    {first[key]} -> {second[key]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hashes", type=Path)
    parser.add_argument("--compare", type=Path, nargs=2)
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare)
    elif args.hashes:
        hashes(args.hashes)
    else:
        costs(args.rounds)


if __name__ == "__main__":
    main()
