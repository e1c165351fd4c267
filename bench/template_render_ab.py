"""Chat-template render CPU, this tree's `gateway/prompts/template.py` against a base commit's, interleaved.

Rows (µs of process CPU per render, the mean over --rounds rounds of --renders renders, the two sides taking turns
to go first; every render's conversation differs, so no kept render answers it):

- plain chat: SmolLM2's template (the embedded model's), 21 messages;
- tool history, content null: 5 rounds of an assistant's call with `content: null`, its result, an answer and a new
  question (arguments as JSON text, as the DeepSeek family gives them), through held-out templates from
  tests/data/chat_templates/ (DeepSeek R1's tests `content is none`; Qwen3's splits the content, and raised on None
  at the base).

    python bench/template_render_ab.py [--base main] [--rounds 10] [--renders 300]
    python bench/template_render_ab.py --callgrind [--renders 100]   # instructions per render, each side and row
                                                                     # run under valgrind with 0 and N renders
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.checkpoint import load_checkpoint
from gateway.prompts import template as this_tree

TEMPLATES = ROOT / "tests" / "data" / "chat_templates"
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def base_module(commit: str) -> ModuleType:
    """`gateway/prompts/template.py` as it is at `commit`, imported under its own name, with `commit`'s
    `template_bounds.py` where it has one (not this tree's)."""
    text = _show(commit, "gateway/prompts/template.py")
    bounds = _show(commit, "gateway/prompts/template_bounds.py")
    if bounds is not None:
        _load("base_template_bounds", bounds)
        text = text.replace("from gateway.prompts import template_bounds as", "import base_template_bounds as")
        text = text.replace("from gateway.prompts.template_bounds import", "from base_template_bounds import")
    return _load("base_template", text)


def _show(commit: str, path: str) -> str | None:
    shown = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{commit}:{path}"], capture_output=True, text=True, check=False
    )
    return shown.stdout if shown.returncode == 0 else None


def _load(name: str, text: str) -> ModuleType:
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def plain_chat(i: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for k in range(10):
        messages += [{"role": "user", "content": f"question {i} {k}"}, {"role": "assistant", "content": f"answer {k}"}]
    return [*messages, {"role": "user", "content": f"last {i}"}]


def tool_history(i: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"q {i}"}]
    for k in range(5):
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "21"},
            {"role": "assistant", "content": "warm"},
            {"role": "user", "content": f"again {k}"},
        ]
    return messages


def per_render_us(module: ModuleType, source: str, conversation: Callable[[str], list], tag: str, n: int) -> float:
    """µs of CPU per render, or NaN where the module raises."""
    start = time.process_time()
    try:
        for i in range(n):
            module.render_chat_template(source, conversation(f"{tag}-{i}"))
    except module.TemplateError:
        return float("nan")
    return (time.process_time() - start) / n * 1e6


def rows() -> list[tuple[str, str, Callable[[str], list]]]:
    return [
        ("plain chat, SmolLM2", load_checkpoint().chat_template, plain_chat),
        ("tool history, DeepSeek-R1", (TEMPLATES / "deepseek-ai-DeepSeek-R1.jinja").read_text(), tool_history),
        ("tool history, Qwen3-0.6B", (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text(), tool_history),
    ]


def callgrind_instructions(base: str, side: str, row: int, renders: int) -> int:
    """Instructions valgrind counts for a process that renders row `row` `renders` times on `side`."""
    out = Path(tempfile.mkdtemp()) / "callgrind.out"
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__]
    command += ["--base", base, "--render-only", side, str(row), str(renders)]
    log = subprocess.run(command, capture_output=True, text=True, check=True).stderr
    return int(log.rsplit("Collected : ", 1)[1].split()[0])


def render_only(base: str, side: str, row: int, renders: int) -> None:
    """Render row `row` `renders` times (after three warm-up renders) with `side`'s module: a callgrind subject."""
    module = base_module(base) if side == "base" else this_tree
    _, source, conversation = rows()[row]
    for i in range(3 + renders):
        module.render_chat_template(source, conversation(f"{side}-{i}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--renders", type=int, default=300)
    parser.add_argument("--callgrind", action="store_true", help="instructions per render instead of CPU time")
    parser.add_argument("--render-only", nargs=3, metavar=("SIDE", "ROW", "RENDERS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.render_only:
        side, row, renders = args.render_only
        render_only(args.base, side, int(row), int(renders))
        return
    if args.callgrind:
        print(f"| row | base ({args.base}) instructions per render | this tree | change |\n|---|---|---|---|")
        for index, (label, _, _) in enumerate(rows()):
            per = {}
            for side in ("base", "this"):
                counts = [callgrind_instructions(args.base, side, index, n) for n in (0, args.renders)]
                per[side] = (counts[1] - counts[0]) / args.renders
            change = per["this"] / per["base"] - 1
            print(f"| {label} | {per['base']:,.0f} | {per['this']:,.0f} | {change:+.1%} |")
        return
    sides = {"base": base_module(args.base), "this tree": this_tree}
    print(f"| row | base ({args.base}) µs | this tree µs |\n|---|---|---|")
    for label, source, conversation in rows():
        totals = dict.fromkeys(sides, 0.0)
        for r in range(args.rounds):
            order = list(sides) if r % 2 else list(reversed(sides))
            for side in order:
                totals[side] += per_render_us(sides[side], source, conversation, f"{side}{r}", args.renders)
        base, ours = (totals[s] / args.rounds for s in sides)
        print(f"| {label} | {'raises' if math.isnan(base) else f'{base:.1f}'} | {ours:.1f} |")


if __name__ == "__main__":
    main()
