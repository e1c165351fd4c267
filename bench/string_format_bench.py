"""String formats and narrowed patterns: grammar build + xgrammar compile CPU time of one tool per format.

Each row is a request with one tool whose single required parameter is `{"type": "string", "format": F}` (or a
`pattern`), tool_choice "required", built by the family on its real vocabulary (tests/grammar_walks.py's subjects:
hermes on Qwen3's, mistral on tekken's) and compiled by xgrammar with its cache off. Cells: median of --repeats,
ms of process CPU time (the compiler's threads included). Run it from two trees to compare (a tree that drops a
format pays nothing for it):

    python bench/string_format_bench.py [--repeats 5] [--family hermes --family mistral]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import xgrammar as xg

from backends.xgrammar_compile import compile_grammar
from gateway.grammars import safe_json
from gateway.types import ChatRequest
from tests.grammar_walks import SUBJECTS, Subject

FORMATS = ["date", "time", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"]
FORMATS += ["uri", "json-pointer", "uri-template"]
PATTERNS = ["^\\S+$", "^.{1,40}$", "^[^@\\s]+@[^@\\s]+$"]


def request(parameter: dict) -> ChatRequest:
    schema = {"type": "object", "properties": {"v": {"type": "string", **parameter}}, "required": ["v"]}
    tool = {"type": "function", "function": {"name": "f", "parameters": schema, "strict": True}}
    return ChatRequest(messages=[{"role": "user", "content": "x"}], tools=[tool], tool_choice="required")


def cpu_ms(subject: Subject, parameter: dict, repeats: int) -> float:
    compiler = xg.GrammarCompiler(subject.info, cache_enabled=False, max_threads=1)
    times = []
    for _ in range(repeats):
        safe_json._kept_value_ebnf.cache_clear()
        safe_json.regex_grammar.cache_clear()
        start = time.process_time()
        grammar = subject.family.grammar(request(parameter), subject.prompts[0])
        compile_grammar(compiler, grammar.kind, grammar.text)
        times.append((time.process_time() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--family", action="append", choices=sorted(SUBJECTS))
    args = parser.parse_args()
    families = args.family or ["hermes", "mistral"]
    subjects = [SUBJECTS[name]() for name in families]
    print("| parameter | " + " | ".join(f"{name} CPU ms" for name in families) + " |")
    print("|---|" + "---:|" * len(families))
    rows = [({}, "plain string")] + [({"format": f}, f"format {f}") for f in FORMATS]
    rows += [({"pattern": p}, f"pattern `{p}`") for p in PATTERNS]
    for parameter, label in rows:
        cells = [f"{cpu_ms(subject, parameter, args.repeats):.0f}" for subject in subjects]
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
