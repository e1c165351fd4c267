"""CPU a prompt past the context costs each door before its refusal, and what the bound adds to a short chat.

In-process (Starlette's TestClient, no backend: a refused prompt never reaches one), the embedded model (hermes):

- each door given a user text of `"héllo " * --repeat` (6 MB by default): the answer's status and code, and the
  process CPU the request took (the first request also computes the tokenizer's character bound, once per model);
- `encode_chat` of a one-line chat, `--calls` times: CPU per call (the check there is one `len` for a short prompt).

Run it from two trees to compare (PYTHONPATH picks the tree):

    PYTHONPATH=$PWD python bench/prompt_bound_bench.py [--repeat 1000000] [--calls 100000]
"""

from __future__ import annotations

import argparse
import resource
import time

from starlette.testclient import TestClient

from backends.checkpoint import EMBEDDED_MODEL_ID, load_checkpoint
from gateway.app import create_app
from gateway.models.planning import encode_chat
from gateway.models.registry import ModelRegistry, served_model_from_checkpoint
from gateway.types import ChatRequest


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1_000_000, help='copies of "héllo " in the hostile text')
    parser.add_argument("--calls", type=int, default=100_000, help="short-chat encode_chat calls timed")
    args = parser.parse_args()
    model = served_model_from_checkpoint(EMBEDDED_MODEL_ID, load_checkpoint(), "hermes", None)
    client = TestClient(create_app(ModelRegistry([model])))
    text = "héllo " * args.repeat
    doors = [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": text}]}),
        ("/v1/completions", {"prompt": text + "c"}),  # each text new: no encoder memo hit from the door before
        ("/v1/responses", {"input": text + "r"}),
        ("/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": text + "m"}]}),
    ]
    print(f"| door ({len(text) / 1e6:.1f} MB text) | status | code | CPU s |")
    print("|---|---|---|---|")
    for path, body in doors:
        started = _cpu()
        answer = client.post(path, json={"model": model.id, **body})
        spent = _cpu() - started
        error = answer.json().get("error") or {}
        print(f"| {path} | {answer.status_code} | {error.get('code') or error.get('type')} | {spent:.2f} |")
    short = ChatRequest(messages=[{"role": "user", "content": "What is the capital of France?"}])
    encode_chat(model, short)
    started = time.process_time()
    for _ in range(args.calls):
        encode_chat(model, short)
    print(f"\nshort chat encode_chat: {(time.process_time() - started) / args.calls * 1e6:.2f} µs CPU per call")


if __name__ == "__main__":
    main()
