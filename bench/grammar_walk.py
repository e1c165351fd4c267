"""Random walks through each family's grammar on its real vocabulary, parsed back: the contract's failures by kind.

For every family with an offline vocabulary (tests/grammar_walks.py: hermes and qwen3_xml on Qwen3's, glm47 on
GLM's added tokens over SmolLM2's, gpt_oss on o200k_harmony, deepseek_v41 on DeepSeek V4's, mistral on tekken,
llama3_json on Llama 3's) and each request shape (tool_choice auto / required / named, parallel on and off,
response_format, reasoning), walks sample token paths the compiled grammar accepts and feed them through the
family's parser in one chunk and in random chunkings (see tests/grammar_walks.py for the checks). Each family gets
`--seconds` of CPU time for walking (compiles not counted); the table gives walks, how many reached the stop token,
the calls parsed, and the problems by kind; below it, the shortest reproducer of each kind (request shape, ids,
decoded text).

    python bench/grammar_walk.py [--family hermes ...] [--seconds 60] [--seed 1] [--tools held_out]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.grammar_walks import ASKS, SUBJECTS, TOOL_SETS, Subject, Tally, run_walks


def report(subject: Subject, tally: Tally) -> list[str]:
    """The family's table row, then its reproducers."""
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(tally.kinds.items())) or "none"
    lines = [f"| {subject.label} | {tally.walks} | {tally.finished} | {tally.calls} | {kinds} |"]
    for kind, (label, ids, problem) in sorted(tally.examples.items()):
        text = subject.tokenizer.decode(ids, skip_special_tokens=False)
        lines.append(f"    {subject.label} {kind} [{label}]: {problem[:300]}")
        lines.append(f"        ids {ids[:200]}{' ...' if len(ids) > 200 else ''}")
        lines.append(f"        text {text[:400]!r}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", choices=sorted(SUBJECTS), help="repeatable; default: all")
    parser.add_argument("--seconds", type=float, default=60.0, help="CPU seconds of walking per family")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tools", choices=sorted(TOOL_SETS), default="default", help="the tool set declared")
    args = parser.parse_args()
    asks = [replace(ask, tools=args.tools) for ask in ASKS]
    print(f"| family | walks | reached stop | calls parsed | problems |  # {args.seconds:.0f} s each, seed {args.seed}, "
          f"{args.tools} tools")  # fmt: skip
    print("|---|---:|---:|---:|---|")
    notes: list[str] = []
    for name in args.family or list(SUBJECTS):
        subject = SUBJECTS[name]()
        lines = report(subject, run_walks(subject, asks, 10**9, args.seed, args.seconds))
        print(lines[0], flush=True)
        notes += lines[1:]
    print("\n".join(notes))


if __name__ == "__main__":
    main()
