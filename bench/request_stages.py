"""Instructions per call of a chat request's stages inside the gateway, counted by callgrind in one process.

The model of `bench/overhead_bench.py` (the embedded SmolLM2 checkpoint, no backend needed: nothing is sent) and
its request body; each stage is called `--calls` times after a warm-up with callgrind counting only then, less the
loop's own cost. The `token:` stages are a streamed token's, on the stand-in's events (`bench/fast_backend.py`);
the detokenizer's takes the next id of its cycle, whose cost is the `next id` row. Run it from each checkout to
compare two (the counts do not depend on the machine's load; copy this file into the other checkout's bench/):

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/stages.%p \\
        .venv/bin/python bench/request_stages.py [--calls 200] [--out /tmp/stages] [STAGE ...]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import sys
import tempfile
from collections.abc import Callable, Coroutine
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

import orjson
from starlette.requests import Request

sys.path.insert(0, str(Path(__file__).resolve().parent))

from callgrind_counts import counted  # the bench folder is not a package: its path is added above
from fast_backend import paragraph_ids
from overhead_bench import CONFIG, MODEL, chat_body

from backends.base import GenerateRequest, SamplingParams
from backends.detokenizer import Detokenizer
from backends.http_backend import batch_chunk
from backends.http_stream import BodyLines
from backends.sglang import _StreamReader
from backends.vllm import _StreamReader as VLLMReader
from gateway.api.chat import ChatRenderer, start_chat
from gateway.api.streaming import _ChunkDoor
from gateway.models.planning import ChatPlan, plan_chat
from gateway.models.registry import ServedModel, served_model
from gateway.observability import access_log
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.requests import RequestRecord
from gateway.observability.whole_lines import WholeLines
from gateway.process.config import load_config
from gateway.process.launch import start_models
from gateway.types import ChoiceStep
from gateway.validation.chat import ChatCompletionRequest, parse_chat_completion

T = TypeVar("T")
BODY = orjson.loads(chat_body(1))
SGLANG_EVENT = (  # tokenizer_manager's meta_info (SGLang 0.5.23, metrics off), an incremental event
    b'data: {"text":" the","output_ids":[4219],"meta_info":{"id":"4b1d8c6e2f0a4c7e9b3d5f1a2c4e6b8d",'
    b'"finish_reason":null,"prompt_tokens":31,"weight_version":"default","num_retractions":0,"reasoning_tokens":0,'
    b'"completion_tokens":7,"cached_tokens":0}}'
)
VLLM_EVENT = (
    b'data: {"id":"cmpl-1","object":"text_completion","created":1733140000,"model":"m","choices":[{"index":0,'
    b'"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null,"token_ids":[4219],'
    b'"prompt_logprobs":null,"prompt_token_ids":null}],"usage":null}'
)
VLLM_GENERATE_EVENT = (
    b'data: {"request_id":"r","choices":[{"index":0,"logprobs":null,"finish_reason":null,"token_ids":[4219]}]}'
)
"""The overhead bench's streamed chat, for one token."""
TURNS = [
    {"role": "system", "content": "Be brief."},
    *(
        {"role": role, "content": f"{role} turn {i} about the printing press"}
        for i in range(5)
        for role in ("user", "assistant")
    ),
    {"role": "user", "content": "And then?"},
]


def stages() -> dict[str, Callable[[], object]]:
    """Each stage as a call, on one served model (its backend never reached)."""
    config = Path(tempfile.mkdtemp(prefix="request-stages-")) / "gateway.yaml"
    config.write_text(CONFIG.format(model=MODEL, url="http://127.0.0.1:9"))
    registry = start_models(load_config(config), ExitStack())
    metrics = GatewayMetrics(registry)
    access_log.configure_logging("info")
    devnull = WholeLines(open(os.devnull, "w"))  # noqa: SIM115  (open for the process's life)
    for handler in access_log.logging.getLogger().handlers:
        handler.lines = devnull
    parsed = parse_chat_completion(BODY)
    model = served_model(registry, MODEL)
    plan = plan_chat(model, parsed.chat, parsed.settings)
    record = RequestRecord("POST", "/v1/chat/completions", status=200, model=MODEL, generating=True)
    record.first_token, record.last_token, record.dispatched = (
        record.started + 0.01,
        record.started + 0.02,
        record.started + 0.001,
    )
    record.prompt_tokens, record.completion_tokens, record.finish_reasons = len(plan.ids), 1, ["length"]
    ended = record.started + 0.03
    many_turns = {**BODY, "messages": TURNS}
    line = access_log.access_line(record, "/v1/chat/completions", ended) + b"\n"
    to_file = WholeLines.append_to(config.parent / "access.log")
    many = parse_chat_completion(many_turns)
    request = Request({"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": [], "state": {}})
    return {
        "nothing (the loop's own cost, taken off the others)": lambda: None,
        "parse_chat_completion (the overhead bench's body)": lambda: parse_chat_completion(BODY),
        f"parse_chat_completion ({len(TURNS)} messages)": lambda: parse_chat_completion(many_turns),
        "plan_chat (render and prompt kept)": lambda: plan_chat(model, parsed.chat, parsed.settings),
        f"plan_chat ({len(TURNS)} messages, render and prompt kept)": lambda: plan_chat(
            model, many.chat, many.settings
        ),
        "start_chat (plan, admission, the choices' set-up; nothing sent)": lambda: _driven(
            start_chat(request, model, parsed.chat, parsed.settings, "chatcmpl-0")
        ),
        "family.parser": lambda: model.family.parser(parsed.chat, plan.prompt),
        "metrics.record_request": lambda: metrics.record_request(record, "/v1/chat/completions", ended),
        "log_access": lambda: access_log.log_access(record, "/v1/chat/completions", ended),
        "WholeLines.write (an access line appended to a file)": lambda: to_file.write(line),
        **token_stages(model, parsed, plan),
    }


def _driven(coroutine: Coroutine[Any, Any, T]) -> T:
    """The value of a coroutine that awaits nothing (the chat door's start for a request without policies)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("the coroutine awaited something")


def token_stages(model: ServedModel, parsed: ChatCompletionRequest, plan: ChatPlan) -> dict[str, Callable[[], object]]:
    """A streamed token's stages, on the stand-in's events (one token each, its output ids in turn)."""
    ids, _ = paragraph_ids()
    cycle = itertools.cycle(ids)
    line = b'data: {"text":"","output_ids":[%d],"meta_info":{"id":"chatcmpl-0-0","finish_reason":null,' % ids[0]
    line += b'"prompt_tokens":%d,"completion_tokens":7,"cached_tokens":0}}' % len(plan.ids)
    event = line + b"\n\n"
    chunk = b"%x\r\n" % len(event) + event + b"\r\n"
    body, reader = BodyLines(chunked=True, length=None), _StreamReader(incremental=True)
    sglang_reader = _StreamReader(incremental=True)
    request = GenerateRequest("r", plan.ids, SamplingParams(1 << 30))
    completions, generate = VLLMReader("completions", request), VLLMReader("generate", request)
    detokenizer = Detokenizer(model.tokenizer, model.added_ids)
    for token in ids:  # every id of the cycle learned (once per process), as in a gateway that has served a while
        detokenizer.feed([token])
    renderer = ChatRenderer(
        1, lambda: model.family.parser(parsed.chat, plan.prompt), None, len(plan.ids), model.count_tokens
    )
    envelope = {"id": "chatcmpl-0", "object": "chat.completion.chunk", "created": 0, "model": model.id}
    door = _ChunkDoor(renderer, envelope, True, "chat.completion")
    step = ChoiceStep(detokenizer.feed([ids[1]]), [], None, 7, 0, None)
    return {
        "token: next id (the stages below that take one include it)": lambda: next(cycle),
        "token: BodyLines.feed (one event's chunk)": lambda: body.feed(chunk),
        "token: batch_chunk (the event's lines, SGLang's reader)": lambda: batch_chunk(
            [line, b""], reader.chunks, reader.ended
        ),
        "token: SGLang 0.5.23's event (its meta_info's extra fields), the reader's chunks": lambda: (
            sglang_reader.chunks(SGLANG_EVENT)
        ),
        "token: vLLM /v1/completions event, the reader's line": lambda: completions.line(VLLM_EVENT),
        "token: vLLM /inference/v1/generate event, the reader's line": lambda: generate.line(VLLM_GENERATE_EVENT),
        "token: detokenizer.feed (one id)": lambda: detokenizer.feed([next(cycle)]),
        "token: ChoiceStep": lambda: ChoiceStep([], [], None, 7, 0, None),
        "token: renderer.step and frame (one piece of text)": lambda: [door.frame(c) for c in door.step(0, step)],
    }


def per_call(out: str, dump: int, work: Callable[[], object], calls: int) -> float:
    """Instructions per call of `work` (callgrind's dump number `dump` of this process), after a warm-up."""
    for _ in range(50):
        work()

    def calls_of_work() -> None:
        for _ in range(calls):
            work()

    return counted(out, dump, calls_of_work) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", default="/tmp/stages", help="callgrind's --callgrind-out-file, less its .%%p")
    parser.add_argument("stage", nargs="*", help="stages to count (default: all), by the start of their name")
    args = parser.parse_args()
    every = stages()
    gc.collect()
    gc.freeze()  # as `gateway serve` does before serving
    loop = next(iter(every))
    chosen = [
        name for name in every if name != loop and (not args.stage or any(name.startswith(s) for s in args.stage))
    ]
    counts = {name: per_call(args.out, i, every[name], args.calls) for i, name in enumerate([loop, *chosen], 1)}
    print("| stage | instructions per call |\n|---|---:|")
    for name in chosen:
        print(f"| {name} | {counts[name] - counts[loop]:,.0f} |")


if __name__ == "__main__":
    main()
