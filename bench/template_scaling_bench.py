"""How a chat template's render cost grows with the conversation: the gateway's bounded render (prompts/template.py)
against plain Jinja (transformers' sandbox, no bounds) of the same template, to tell the template's own growth from
the gateway's.

Rows: conversations of N alternating user / assistant messages (each render's text new, so no kept render answers
it). Columns: process CPU seconds per render, each side's mean over --rounds rounds, the two sides taking turns to go
first; the steps the gateway's bounds charged (prompts/template_bounds.py) and the limits' headroom.

    python bench/template_scaling_bench.py [--template tests/data/chat_templates/google-gemma-4-31B-it.jinja]
                                           [--sizes 500,1000,2000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.prompts import template as gateway_template
from gateway.prompts import template_bounds as bounds


def conversation(size: int, salt: int) -> dict[str, Any]:
    """A render context of `size` alternating messages, its text marked by `salt`."""
    messages = [{"role": ("user", "assistant")[i % 2], "content": f"message {i} of round {salt}"} for i in range(size)]
    return {"messages": messages, "add_generation_prompt": True, "bos_token": "<bos>", "eos_token": "<eos>"}


def _raise(message: str) -> None:
    raise ValueError(message)


def plain_render(source: str) -> Callable[[dict[str, Any]], str]:
    """The template as transformers renders it: Jinja's immutable sandbox, nothing bounded."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.globals["raise_exception"] = _raise
    return env.from_string(source).render


def bounded_render(source: str, end_finished_scans: bool = True) -> Callable[[dict[str, Any]], tuple[str, int]]:
    """The gateway's render of the template (its bounds on), and the steps it charged; `end_finished_scans=False`:
    its loops as written (prompts/loop_exit.py's pass off)."""
    if end_finished_scans:
        template = gateway_template.compile_template(source)
    else:
        template = gateway_template._environment(end_finished_scans=False).from_string(source)
        template.globals = dict(template.globals)  # as compile_template has it

    def render(context: dict[str, Any]) -> tuple[str, int]:
        with bounds.render_budget(bounds.MAX_TEMPLATE_STEPS, 1 << 30):
            text = "".join(template.generate(context))
            return text, bounds.MAX_TEMPLATE_STEPS - bounds._STATE.budget.steps

    return render


def cpu_s(render: Callable[[dict[str, Any]], Any], context: dict[str, Any]) -> float:
    """The process CPU seconds `render(context)` took."""
    started = time.process_time()
    render(context)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--template", default=str(ROOT / "tests/data/chat_templates/google-gemma-4-31B-it.jinja"))
    parser.add_argument("--sizes", default="500,1000,2000")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    source = Path(args.template).read_text()
    plain, ours = plain_render(source), bounded_render(source)
    print("| messages | plain Jinja CPU s | gateway CPU s | gateway / plain | steps charged | steps / messages² |")
    print("|---|---|---|---|---|---|")
    previous = None
    for size in map(int, args.sizes.split(",")):
        times = {"plain": 0.0, "ours": 0.0}
        for round_ in range(args.rounds):
            sides = [("plain", plain), ("ours", ours)]
            for name, render in sides if round_ % 2 == 0 else sides[::-1]:
                times[name] += cpu_s(render, template_context(size, round_)) / args.rounds
        steps = ours(template_context(size, -1))[1]
        growth = "" if previous is None else f" (x{times['plain'] / previous:.1f})"
        previous = times["plain"]
        print(
            f"| {size:,} | {times['plain']:.2f}{growth} | {times['ours']:.2f} | {times['ours'] / times['plain']:.2f} "
            f"| {steps:,} | {steps / size**2:.2f} |",
            flush=True,
        )


def template_context(size: int, salt: int) -> dict[str, Any]:
    """The context both sides are given: the messages as transformers hands them to a template."""
    context = conversation(size, salt)
    context["messages"] = gateway_template.template_messages(context["messages"])
    return context


if __name__ == "__main__":
    main()
