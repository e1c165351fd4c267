"""What stopping finished scans saves (prompts/loop_exit.py): chat templates rendered through the gateway's bounded
render with their loops as written ("before") and with the pass's `{% break %}` ("after"), the two texts checked
equal for every row.

Rows: a template, a shape (alternating user / assistant "chat", or an agent's tool loop, bench/gemma4_render_bench.py's)
and a conversation's length. Columns: process CPU ms per render, each side's mean over --rounds rounds (the sides
taking turns to go first, every round's text new so no kept render answers it), after / before, and the loops the
pass rewrote in the template.

    python bench/scan_exit_bench.py [--sizes 50,200,800] [--rounds 3] [--templates google-gemma-4-31B-it,...]
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/scan.cg.%p \
        python bench/scan_exit_bench.py --callgrind /tmp/scan.cg [--sizes 50,200]   # millions of instructions
                                                                                    # per render instead of ms
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jinja2 import nodes

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from callgrind_counts import counted
from gemma4_render_bench import TEMPLATES, context
from template_scaling_bench import bounded_render, cpu_s

from gateway.prompts import template as gateway_template
from gateway.prompts.loop_exit import finished_scan

DEFAULT_TEMPLATES = (
    "google-gemma-4-31B-it,Qwen-Qwen3-0.6B,Qwen-Qwen3.5-4B,Qwen-Qwen3.6-35B-A3B,llama.cpp-stepfun-ai-Step-3.5-Flash"
)


def scans(source: str) -> int:
    """The loops of `source` the pass gives a break."""
    parsed = gateway_template._environment(end_finished_scans=False).parse(source)
    return sum(finished_scan(loop) is not None for loop in parsed.find_all(nodes.For))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50,200,800")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--templates", default=DEFAULT_TEMPLATES)
    parser.add_argument("--callgrind", help="this process runs under callgrind writing to CALLGRIND.%%p: count")
    args = parser.parse_args()
    unit = "M instructions" if args.callgrind else "CPU ms"
    dumps = iter(range(1, 1 << 20))
    print(f"| template | shape | messages | before {unit} | after {unit} | after / before | scans stopped |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in args.templates.split(","):
        source = (TEMPLATES / f"{name}.jinja").read_text()
        sides = {"before": bounded_render(source, end_finished_scans=False), "after": bounded_render(source)}
        for shape in ("chat", "agent"):
            for size in map(int, args.sizes.split(",")):
                probe = context(size, shape, -1)
                assert sides["before"](probe)[0] == sides["after"](probe)[0], f"{name} {shape} {size}: renders differ"
                times = dict.fromkeys(sides, 0.0)
                for round_ in range(args.rounds):
                    order = list(sides.items()) if round_ % 2 == 0 else list(sides.items())[::-1]
                    for side, render in order:
                        conversation = context(size, shape, round_)
                        if args.callgrind:
                            work = counted(args.callgrind, next(dumps), lambda: render(conversation)) / 1e6  # noqa: B023
                        else:
                            work = cpu_s(render, conversation) * 1000
                        times[side] += work / args.rounds
                ratio = times["after"] / times["before"]
                print(
                    f"| {name} | {shape} | {size:,} | {times['before']:.1f} | {times['after']:.1f} | {ratio:.2f} "
                    f"| {scans(source)} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
