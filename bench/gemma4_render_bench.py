"""Where Gemma 4's chat template spends its render time as the conversation grows, for a chat and for an agent's
tool loop, through the gateway's bounded render (prompts/template.py), plain Jinja, and plain Jinja with the
template's two forward scans stopped where they have found what they look for (`{% break %}`: the same text).

Gemma 4 has no native encoder here (the checkpoint's template renders, gemma4/family.py), so the gateway's cost is
the template's: the current revision (tests/data/chat_templates/google-gemma-4-31B-it.jinja) scans, for every
message, all later ones for the next non-tool role, and for every message with tool_calls all later ones for its
tool results (`{% for j in range(loop.index0 + 1, loop_messages | length) %}` with no `break`): n²/2 iterations.
The launch revision (llama.cpp-gemma4.jinja) has no such scan. The gateway stops both scans itself
(prompts/loop_exit.py): "gateway" is its render, "gateway, loops as written" the same with that pass off.

    python bench/gemma4_render_bench.py [--sizes 50,200,800] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from template_scaling_bench import bounded_render, cpu_s, plain_render

from gateway.prompts import template as gateway_template

TEMPLATES = ROOT / "tests/data/chat_templates"
SCAN_ENDS = ("{%- set next_nt.found = true -%}", "{%- set ns_tool_scan.stopped = true -%}")
"""The statements after which the template's two forward scans do nothing more (their guards read these flags)."""


def stopping_scans(source: str) -> str:
    """The template with `{% break %}` after each scan has found its answer (every later iteration was a no-op)."""
    for end in SCAN_ENDS:
        assert source.count(end) == 1, end
        source = source.replace(end, end + "{%- break -%}")
    return source


def messages(size: int, shape: str, salt: int) -> list[dict[str, Any]]:
    """`size` messages: alternating user / assistant ("chat"), or an agent's loop of a user turn then assistant
    tool calls, each answered by a tool message, and a closing answer ("agent")."""
    if shape == "chat":
        return [{"role": ("user", "assistant")[i % 2], "content": f"message {i} of round {salt}"} for i in range(size)]
    out: list[dict[str, Any]] = [{"role": "user", "content": f"task of round {salt}"}]
    while len(out) < size - 1:
        n = len(out)
        call = {"id": f"c{n}", "type": "function", "function": {"name": "run", "arguments": {"step": n}}}
        out += [{"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{n}", "content": f"result {n}"}]  # fmt: skip
    return (out + [{"role": "assistant", "content": "done"}])[:size]


def context(size: int, shape: str, salt: int) -> dict[str, Any]:
    tools = [{"type": "function", "function": {"name": "run", "description": "Run a step.", "parameters": {
        "type": "object", "properties": {"step": {"type": "integer"}}, "required": ["step"]}}}]  # fmt: skip
    return {
        "messages": gateway_template.template_messages(messages(size, shape, salt)),
        "tools": tools if shape == "agent" else None,
        "add_generation_prompt": True,
        "bos_token": "<bos>",
        "eos_token": "<eos>",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50,200,800")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    source = (TEMPLATES / "google-gemma-4-31B-it.jinja").read_text()
    launch = (TEMPLATES / "llama.cpp-gemma4.jinja").read_text()
    sides = {
        "gateway, loops as written": bounded_render(source, end_finished_scans=False),
        "gateway": bounded_render(source),
        "plain": plain_render(source),
        "plain, scans stopped": plain_render(stopping_scans(source)),
        "plain, launch template": plain_render(launch),
    }
    print("| shape | messages | " + " | ".join(f"{name} CPU ms" for name in sides) + " | gateway steps |")
    print("|---|---:|" + "---:|" * (len(sides) + 1))
    for shape in ("chat", "agent"):
        for size in map(int, args.sizes.split(",")):
            probe = context(size, shape, -1)
            plain_text = sides["plain"](probe)
            rewritten = sides["gateway"](probe)[0]
            assert rewritten == sides["gateway, loops as written"](probe)[0], "renders differ"
            assert rewritten == plain_text == sides["plain, scans stopped"](probe), "renders differ"
            steps = sides["gateway"](probe)[1]
            times = dict.fromkeys(sides, 0.0)
            for round_ in range(args.rounds):  # the sides take turns to go first
                order = list(sides.items())
                for name, render in order[round_ % len(order) :] + order[: round_ % len(order)]:
                    times[name] += cpu_s(render, context(size, shape, round_)) * 1000 / args.rounds
            cells = " | ".join(f"{times[name]:.1f}" for name in sides)
            print(f"| {shape} | {size:,} | {cells} | {steps:,} |", flush=True)


if __name__ == "__main__":
    main()
