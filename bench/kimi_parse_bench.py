"""Stream-parse long Kimi K3 outputs one token per delta: the gateway's parser vs SGLang's KimiK3Detector.

The output is synthetic but shaped like K3's: reasoning, `<|close|>think<|sep|>`,
a short response, then a tools section whose calls carry long string and
JSON arguments; control tokens are single pieces with a token id, as the
gateway's detokenizer delivers them. The peer (llm-router-utils' extraction
of SGLang's detector) runs in its own interpreter, never imported here: it
gets the text after the think channel (what SGLang hands it after its
reasoning parser), one token's text per increment.

    python bench/kimi_parse_bench.py [--peer-python /tmp/peer-venv/bin/python] [--sizes 1000 8000 32000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.families.kimi.markers import CLOSE, OPEN, SEP
from gateway.families.kimi.parser import KimiK3Parser
from gateway.types import Piece

IDS = {OPEN: 163587, CLOSE: 163588, SEP: 163589}
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

PEER_SCRIPT = r"""
import json, sys, time
from llm_router_utils.sglang.srt.function_call.kimik3_detector import KimiK3Detector
texts = json.load(sys.stdin)
detector = KimiK3Detector()
calls = 0
start = time.perf_counter()
for text in texts:
    calls += len(detector.parse_streaming_increment(text, []).calls)
calls += len(detector.finish([]).calls)
print(json.dumps({"seconds": time.perf_counter() - start, "calls": calls}))
"""


def tag(head: str) -> list[Piece]:
    """`<|open|>head<|sep|>` or, for "/name", `<|close|>name<|sep|>`: control pieces around ordinary text."""
    marker = CLOSE if head.startswith("/") else OPEN
    return [Piece(marker, IDS[marker]), Piece(head.lstrip("/")), Piece(SEP, IDS[SEP])]


def words(count: int, offset: int = 0) -> list[Piece]:
    return [Piece(WORDS[(offset + i) % len(WORDS)]) for i in range(count)]


def synthetic_output(tokens: int) -> list[Piece]:
    """About `tokens` pieces: 30% reasoning, a short response, calls with long arguments for the rest."""
    out = [*words(tokens * 3 // 10), *tag("/think"), *tag("response"), *words(20), *tag("/response"), *tag("tools")]
    calls = 0
    while len(out) < tokens - 12:
        calls += 1
        out += tag(f'call tool="write_file" index="{calls}"')
        out += [*tag('argument key="path" type="string"'), Piece("notes.txt"), *tag("/argument")]
        out += [*tag('argument key="lines" type="number"'), Piece("12"), *tag("/argument")]
        out += [
            *tag('argument key="content" type="string"'),
            *words(min(2000, tokens - len(out) - 12), calls),
            *tag("/argument"),
        ]
        out += tag("/call")
    return out + tag("/tools") + tag("/message")


def ours(pieces: list[Piece]) -> tuple[float, int]:
    """Seconds to stream `pieces` one per feed, and the calls seen."""
    parser = KimiK3Parser(channel="think")
    calls = 0
    start = time.perf_counter()
    for piece in pieces:
        for delta in parser.feed((piece,)):
            calls += delta.tool_name is not None
    for delta in parser.finish():
        calls += delta.tool_name is not None
    return time.perf_counter() - start, calls


def peer(python: str, pieces: list[Piece]) -> tuple[float, int] | None:
    """The peer detector's seconds and calls on the post-think text, or None when it cannot run."""
    texts = [p.text for p in pieces]
    after_think = next(i for i in range(len(texts)) if texts[i : i + 3] == [CLOSE, "think", SEP]) + 3
    return run_peer(python, PEER_SCRIPT, texts[after_think:])


def run_peer(python: str, script: str, payload: object) -> tuple[float, int] | None:
    """`python -c script` fed `payload` as JSON on stdin: the seconds and calls its last line reports, or None
    when it cannot run."""
    try:
        done = subprocess.run(
            [python, "-c", script], input=json.dumps(payload), capture_output=True, text=True, timeout=900, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["seconds"], result["calls"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 8000, 32000])
    parser.add_argument("--peer-python", default=os.environ.get("KIMI_PEER_PYTHON", "/tmp/peer-venv/bin/python"))
    args = parser.parse_args()
    print("| tokens | ours µs/token | ours calls | peer µs/token | peer calls |")
    print("|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        pieces = synthetic_output(size)
        seconds, calls = min(ours(pieces) for _ in range(3))
        theirs = peer(args.peer_python, pieces) if Path(args.peer_python).exists() else None
        peer_cells = f"{theirs[0] / len(pieces) * 1e6:.1f} | {theirs[1]}" if theirs else "n/a | n/a"
        print(f"| {len(pieces)} | {seconds / len(pieces) * 1e6:.2f} | {calls} | {peer_cells} |")


if __name__ == "__main__":
    main()
