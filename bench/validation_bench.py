"""Instructions (or CPU microseconds) per call of validating representative request bodies, in one process.

Each body is validated `--calls` times after a warm-up: with `--callgrind OUT`, under
`valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=OUT.%p`, counting only then, less the loop's own
cost; without, `time.process_time` per call (the machine's load moves it). Run it with another tree first on
PYTHONPATH to count that tree's validators (this file needs only `bench/callgrind_counts.py` beside it):

    PYTHONPATH=$TREE valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/valid.%p \\
        .venv/bin/python bench/validation_bench.py --callgrind /tmp/valid [--one-by-one] [--calls 300] [BODY ...]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import orjson
from callgrind_counts import counted  # the bench folder is not a package: its path is added above
from overhead_bench import MESSAGES, MODEL, chat_body

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
CHAT_BENCH = orjson.loads(chat_body(1))
"""The overhead bench's streamed chat, for one token."""
CHAT_17 = {
    "model": MODEL,
    "messages": MESSAGES,
    "tools": TOOLS,
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "temperature": 0.7,
    "top_p": 0.9,
    "max_completion_tokens": 64,
    "seed": 7,
    "stop": ["\n\n"],
    "user": "u-1",
    "metadata": {"app": "bench"},
    "response_format": {"type": "json_object"},
    "logprobs": True,
    "top_logprobs": 2,
    "stream": True,
    "stream_options": {"include_usage": True},
}
"""Tools and 16 other fields (the body of valid17's per-field table, bench/RESULTS.md)."""
RESPONSES = {
    "model": MODEL,
    "input": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "Tell me about the printing press."}]},
    ],
    "instructions": "Answer in English.",
    "max_output_tokens": 64,
    "temperature": 0.7,
    "stream": True,
    "store": False,
}
MESSAGES_BODY = {
    "model": MODEL,
    "max_tokens": 64,
    "system": "Be brief.",
    "messages": [
        {"role": "user", "content": "Tell me about the printing press."},
        {"role": "assistant", "content": [{"type": "text", "text": "Which part?"}]},
        {"role": "user", "content": "Its history."},
    ],
    "temperature": 0.7,
    "stream": True,
}
COMPLETION = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0.5, "stream": True}


def bodies(one_by_one: bool = False) -> dict[str, Callable[[], object]]:
    """Each body's validation, by name (imported here, so that the tree on PYTHONPATH is the one counted);
    `one_by_one`: chat bodies of model and messages plus the 17-field body's other fields, one more each."""
    from gateway.validation.chat import parse_chat_completion
    from gateway.validation.completions import parse_completion
    from gateway.validation.messages import parse_messages_request
    from gateway.validation.responses import parse_responses_request

    def chat(body: dict[str, Any]) -> Callable[[], object]:
        return lambda: parse_chat_completion(body)

    if one_by_one:
        keys = list(CHAT_17)
        return {
            f"chat: + {keys[n - 1]} ({n})": chat({k: CHAT_17[k] for k in keys[:n]}) for n in range(2, len(keys) + 1)
        }
    return {
        "chat: model, messages": chat({"model": MODEL, "messages": MESSAGES}),
        "chat: the overhead bench's body (7 fields)": chat(CHAT_BENCH),
        "chat: tools and 16 other fields (17)": chat(CHAT_17),
        "completions: 5 fields": lambda: parse_completion(COMPLETION),
        "responses: 7 fields, 2 input items": lambda: parse_responses_request(RESPONSES),
        "messages: 6 fields, 3 turns": lambda: parse_messages_request(MESSAGES_BODY),
    }


def per_call(work: Callable[[], object], calls: int, out: str | None, dump: int) -> float:
    """Instructions (`out`: callgrind's dump number `dump` of this process) or CPU microseconds per call of `work`."""
    for _ in range(50):
        work()

    def calls_of_work() -> None:
        for _ in range(calls):
            work()

    if out is not None:
        return counted(out, dump, calls_of_work) / calls
    start = time.process_time()
    calls_of_work()
    return (time.process_time() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--callgrind", metavar="OUT", help="callgrind's --callgrind-out-file, less its .%%p")
    parser.add_argument("--one-by-one", action="store_true", help="chat bodies of 2 to 17 fields, one more each")
    parser.add_argument("body", nargs="*", help="bodies to validate (default: all), by the start of their name")
    args = parser.parse_args()
    every = {"(the loop alone)": lambda: None, **bodies(args.one_by_one)}
    gc.collect()
    gc.freeze()  # as `gateway serve` does before serving
    chosen = [name for name in every if not args.body or any(name.startswith(b) for b in args.body)]
    names = ["(the loop alone)", *(name for name in chosen if name != "(the loop alone)")]
    counts = {name: per_call(every[name], args.calls, args.callgrind, i) for i, name in enumerate(names, 1)}
    unit = "instructions" if args.callgrind else "CPU µs"
    print(f"| body | {unit} per call |\n|---|---:|")
    for name in names[1:]:
        print(f"| {name} | {counts[name] - counts[names[0]]:,.{0 if args.callgrind else 1}f} |")


if __name__ == "__main__":
    main()
