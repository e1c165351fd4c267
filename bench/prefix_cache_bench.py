"""A 10-turn agent conversation on the bundled worker, with and without its prefix cache, side by side.

    python bench/prefix_cache_bench.py [--threads 2] [--turns 10] [--answer-tokens 48]

Starts two real worker processes on the embedded model (one with `--no-prefix-cache`) and plays the same
conversation on both, turn by turn in alternation so that both see the same machine load: each turn's
prompt is the previous prompt, the answer the worker gave (greedy) and a new user message. Per turn it
prints the prompt tokens, the tokens each worker prefilled (the prompt less `meta_info.cached_tokens`),
the engine's own prefill seconds (from /get_server_info) and the time to the first streamed token, and
checks that both workers gave the same answers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.checkpoint import load_checkpoint
from bench.worker_bench import worker

SYSTEM = (
    "You are a coding agent working in a Python repository. You can call these tools: read_file(path) returns a "
    "file's text; write_file(path, text) replaces a file; run(command) runs a shell command and returns its "
    "output; search(query) finds code by meaning. Think before acting, call one tool at a time, and answer "
    "briefly when the task is done. Never invent file contents: read them first."
)
USER_TURNS = [
    "The tests in tests/test_parser.py fail. Find out why.",
    "read_file returned: def parse(text): return text.split(',')",
    "run('pytest -q tests/test_parser.py') printed: expected ['a', 'b'] got ['a', ' b']",
    "What change would fix it?",
    "Write the fix.",
    "write_file succeeded. Run the tests again.",
    "run printed: 12 passed. Is anything else needed?",
    "Add a test for empty input.",
    "The new test passes. Summarise what you changed.",
    "Thanks. Which other functions might have the same bug?",
]
EOS = 2  # <|im_end|>


@dataclass
class Turn:
    prompt: int
    prefilled: int
    prefill_s: float
    ttft_s: float
    output: list[int]


def prefill_seconds(client: httpx.Client) -> float:
    return client.get("/get_server_info").json()["internal_states"][0]["prefill_seconds"]


def play_turn(client: httpx.Client, prompt: list[int], answer_tokens: int) -> Turn:
    """One streamed greedy answer to `prompt`, with the worker's prefill time and the time to its first token."""
    before = prefill_seconds(client)
    body = {"input_ids": prompt, "stream": True, "sampling_params": {"max_new_tokens": answer_tokens, "temperature": 0}}
    began = time.perf_counter()
    ttft, output, meta = None, [], {}
    with client.stream("POST", "/generate", json=body) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line.removeprefix("data: "))
            if ttft is None:
                ttft = time.perf_counter() - began
            output += event["output_ids"]
            meta = event["meta_info"]
    return Turn(len(prompt), len(prompt) - meta["cached_tokens"], prefill_seconds(client) - before, ttft, output)


def next_prompt(prompt: list[int], answer: list[int], user: str, encode) -> list[int]:
    """The previous prompt, the answer (closed with <|im_end|>) and the next user message."""
    closed = answer if answer and answer[-1] == EOS else [*answer, EOS]
    return prompt + closed + encode(f"\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--turns", type=int, default=len(USER_TURNS))
    parser.add_argument("--answer-tokens", type=int, default=48)
    args = parser.parse_args()
    tokenizer = load_checkpoint().tokenizer

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False).ids

    first = encode(
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{USER_TURNS[0]}<|im_end|>\n<|im_start|>assistant\n"
    )
    options = ("--threads", str(args.threads), "--max-batch", "4", "--context-length", "4096")
    with (
        worker(*options, "--no-prefix-cache") as off_url,
        worker(*options) as on_url,
        httpx.Client(base_url=off_url, timeout=600) as off,
        httpx.Client(base_url=on_url, timeout=600) as on,
    ):
        prompts = {"off": first, "on": first}
        rows: list[tuple[Turn, Turn]] = []
        for turn in range(args.turns):
            pair = (
                play_turn(off, prompts["off"], args.answer_tokens),
                play_turn(on, prompts["on"], args.answer_tokens),
            )
            rows.append(pair)
            user = USER_TURNS[(turn + 1) % len(USER_TURNS)]
            prompts = {
                "off": next_prompt(prompts["off"], pair[0].output, user, encode),
                "on": next_prompt(prompts["on"], pair[1].output, user, encode),
            }
    print(
        f"{args.turns}-turn agent conversation, embedded SmolLM2-135M, {args.threads} threads, fp32, greedy, "
        f"{args.answer_tokens} answer tokens at most; prefill = tokens the engine computed"
    )
    print()
    print(
        "| turn | prompt tokens | prefilled off | prefilled on | prefill s off | prefill s on | TTFT s off | TTFT s on |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, (off_turn, on_turn) in enumerate(rows, 1):
        print(
            f"| {i} | {on_turn.prompt} | {off_turn.prefilled} | {on_turn.prefilled} | {off_turn.prefill_s:.3f} | "
            f"{on_turn.prefill_s:.3f} | {off_turn.ttft_s:.3f} | {on_turn.ttft_s:.3f} |"
        )
    total = [sum(getattr(t[k], f) for t in rows) for f in ("prefilled", "prefill_s", "ttft_s") for k in (0, 1)]
    print(
        f"| all | {sum(t[1].prompt for t in rows)} | {total[0]} | {total[1]} | {total[2]:.3f} | {total[3]:.3f} | "
        f"{total[4]:.3f} | {total[5]:.3f} |"
    )
    same = all(a.output == b.output for a, b in rows)
    print()
    print(f"answers identical with and without the cache: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
