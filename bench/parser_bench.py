"""Stream-parse long tool-call outputs one token per delta: each family's gateway parser vs SGLang's detector.

Per family, a synthetic output in its format: a little reasoning where the
format has it, then one call whose string argument is long (the bench's
long-argument stream). Control tokens are single pieces with a token id, as
the gateway's detokenizer delivers them. The peer (llm-router-utils' extraction
of SGLang's detectors) runs in its own interpreter, never imported here, and
gets the same text, one token's text per increment.

    python bench/parser_bench.py [--peer-python /tmp/famB-peer-venv/bin/python] [--sizes 1000 8000 32000]
        [--families gpt-oss llama mistral gemma4] [--peer-max 8000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.families.base import OutputParser
from gateway.families.gemma4 import Gemma4Parser
from gateway.families.gpt_oss import HarmonyParser
from gateway.families.llama import LLAMA3_JSON, LlamaParser
from gateway.families.mistral import MistralParser
from gateway.types import Piece

WORDS = [" the", " quick", " brown", " fox", " jumps", " over", " lazy", " dog", ".", "\\n", " ü", " 😀", " &", " 42"]
"""Argument text pieces, safe inside a JSON string."""


def control(text: str) -> Piece:
    return Piece(text, 1)


def words(count: int) -> list[Piece]:
    return [Piece(WORDS[i % len(WORDS)]) for i in range(count)]


def harmony(tokens: int) -> list[Piece]:
    head = [control("<|channel|>"), Piece("analysis"), control("<|message|>"), *words(30), control("<|end|>")]
    head += [control("<|start|>"), Piece("assistant"), control("<|channel|>"), Piece("commentary to=functions.write")]
    head += [Piece("_file "), control("<|constrain|>"), Piece("json"), control("<|message|>")]
    head += [Piece('{"path": "notes.txt", "content": "')]
    return [*head, *words(tokens - len(head) - 2), Piece('"}'), control("<|call|>")]


def llama3(tokens: int) -> list[Piece]:
    head = [Piece('{"name": "write_file", "parameters": {"path": "notes.txt", "content": "')]
    return [*head, *words(tokens - 2), Piece('"}}')]


def mistral(tokens: int) -> list[Piece]:
    head = [
        control("[TOOL_CALLS]"),
        Piece("write_file"),
        control("[ARGS]"),
        Piece('{"path": "notes.txt", "content": "'),
    ]
    return [*head, *words(tokens - len(head) - 1), Piece('"}')]


def gemma4(tokens: int) -> list[Piece]:
    quote = control('<|"|>')
    head = [control("<|tool_call>"), Piece("call:write_file{path:"), quote, Piece("notes.txt"), quote]
    head += [Piece(",content:"), quote]
    return [*head, *words(tokens - len(head) - 3), quote, Piece("}"), control("<tool_call|>")]


@dataclass(frozen=True)
class Case:
    output: Callable[[int], list[Piece]]
    parser: Callable[[], OutputParser]
    detector: str
    """`module:Class` of the peer detector under llm_router_utils.sglang.srt.function_call."""


CASES = {
    "gpt-oss": Case(harmony, lambda: HarmonyParser.after("<|start|>assistant"), "gpt_oss_detector:GptOssDetector"),
    "llama": Case(llama3, lambda: LlamaParser(LLAMA3_JSON), "llama32_detector:Llama32Detector"),
    "mistral": Case(mistral, MistralParser, "mistral_detector:MistralDetector"),
    "gemma4": Case(gemma4, Gemma4Parser, "gemma4_detector:Gemma4Detector"),
}

PEER_SCRIPT = r"""
import importlib, json, sys, time
from llm_router_utils.sglang.srt.entrypoints.openai.protocol import Tool
spec = json.load(sys.stdin)
module, name = spec["detector"].split(":")
detector = getattr(importlib.import_module("llm_router_utils.sglang.srt.function_call." + module), name)()
tools = [Tool(type="function", function={"name": "write_file", "parameters": {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"}}}})]
calls = 0
start = time.perf_counter()
for text in spec["texts"]:
    calls += sum(c.name is not None for c in detector.parse_streaming_increment(text, tools).calls)
print(json.dumps({"seconds": time.perf_counter() - start, "calls": calls}))
"""


def ours(case: Case, pieces: list[Piece]) -> tuple[float, int]:
    """Seconds to stream `pieces` one per feed, and the calls seen."""
    parser = case.parser()
    calls = 0
    start = time.perf_counter()
    for piece in pieces:
        calls += sum(d.tool_name is not None for d in parser.feed((piece,)))
    calls += sum(d.tool_name is not None for d in parser.finish())
    return time.perf_counter() - start, calls


def peer(python: str, case: Case, pieces: list[Piece]) -> tuple[float, int] | None:
    """The peer detector's seconds and calls, or None when it cannot run."""
    spec = {"detector": case.detector, "texts": [p.text for p in pieces]}
    try:
        done = subprocess.run(
            [python, "-c", PEER_SCRIPT],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            timeout=1800,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["seconds"], result["calls"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 8000, 32000])
    parser.add_argument("--families", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--peer-python", default=os.environ.get("PEER_PYTHON", "/tmp/famB-peer-venv/bin/python"))
    parser.add_argument("--peer-max", type=int, default=8000, help="largest size the peer runs (its cost is quadratic)")
    args = parser.parse_args()
    print("| family | tokens | ours µs/token | ours calls | peer µs/token | peer calls |")
    print("|---|---:|---:|---:|---:|---:|")
    for family in args.families:
        case = CASES[family]
        for size in args.sizes:
            pieces = case.output(size)
            seconds, calls = min(ours(case, pieces) for _ in range(3))
            theirs = (
                peer(args.peer_python, case, pieces)
                if size <= args.peer_max and Path(args.peer_python).exists()
                else None
            )
            peer_cells = f"{theirs[0] / len(pieces) * 1e6:.1f} | {theirs[1]}" if theirs else "n/a | n/a"
            print(
                f"| {family} | {len(pieces)} | {seconds / len(pieces) * 1e6:.2f} | {calls} | {peer_cells} |", flush=True
            )


if __name__ == "__main__":
    main()
