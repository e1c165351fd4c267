"""The steps Gemma 4's chat template is charged on long conversations (prompts/template_bounds.py), and whether the
gateway's render (its limit of MAX_TEMPLATE_STEPS) takes them, with its CPU time: a loop is charged the iterations it
runs, so the forward scans prompts/loop_exit.py stops cost what they run, not each `range(...)`'s whole length.

    python bench/gemma4_steps_bench.py [--sizes 300,4400,5000,8000]
"""

from __future__ import annotations

import argparse
import time

from gemma4_render_bench import TEMPLATES, context, messages

from gateway.prompts import template_bounds as bounds
from gateway.prompts.template import compile_template, render_chat_template


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="300,4400,5000,8000")
    args = parser.parse_args()
    source = (TEMPLATES / "google-gemma-4-31B-it.jinja").read_text()
    template = compile_template(source)
    print("| shape | messages | steps charged | gateway render | CPU s |")
    print("|---|---:|---:|---|---:|")
    for shape in ("chat", "agent"):
        for size in map(int, args.sizes.split(",")):
            probe = context(size, shape, 0)
            with bounds.render_budget(1 << 40, 1 << 30):
                "".join(template.generate(probe))
                steps = (1 << 40) - bounds._STATE.budget.steps
            began = time.process_time()
            try:
                render_chat_template(source, messages(size, shape, 1), tools=probe["tools"])
                verdict = "rendered"
            except bounds.RenderOverBudget:
                verdict = "refused: past the step limit"
            print(f"| {shape} | {size:,} | {steps:,} | {verdict} | {time.process_time() - began:.2f} |", flush=True)


if __name__ == "__main__":
    main()
