"""The worker's HTTP face: SGLang's endpoints (and vLLM's, from vllm_api) over Starlette, fed by the engine thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from backends.asgi import DONE_FRAME, json_response, wait_for_disconnect
from backends.base import Grammar
from backends.prompt_text import text_bound
from backends.worker.engine import EngineEvent, EngineRequest, Finish
from backends.worker.generations import Generation, WorkerBusy, WorkerState, admit, start_or_refusal
from backends.worker.grammar import Cancelled, CompilerFailed
from backends.worker.handoff import LoopMailbox
from backends.worker.prompt_text import encode_prompt_text
from backends.worker.protocol import ProtocolError, parse_generate, request_json
from backends.worker.vllm_api import vllm_routes


def _error(message: str, status: int = 400) -> Response:
    return json_response({"error": {"message": message}}, status)


def has_text_prompt(body: Any) -> bool:
    """The body asks for a `text` prompt to be encoded (parse_generate then runs on a worker thread)."""
    return isinstance(body, dict) and isinstance(body.get("text"), str)


def build_app(state: WorkerState) -> Starlette:
    """The Starlette application serving `state`'s engine."""

    active: dict[str, Generation] = {}
    mailboxes: dict[asyncio.AbstractEventLoop, LoopMailbox] = {}

    async def compile_unless_left(grammar: Grammar, disconnected: asyncio.Future) -> Any:
        """The compiled grammar; Cancelled once the client has gone (a budgeted compile's child is killed then, an
        unbudgeted one runs on to its end and is cached), WorkerBusy when the compiler failed."""
        cancel = threading.Event()
        compiling = asyncio.ensure_future(asyncio.to_thread(state.grammars.compile, grammar.kind, grammar.text, cancel))
        try:
            await asyncio.wait({compiling, disconnected}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # the client gone, or this task cancelled (the server stopping): the compile is not waited for
            if not compiling.done():
                cancel.set()
                compiling.add_done_callback(lambda done: done.exception())  # no one reads its outcome
        if not compiling.done():
            raise Cancelled
        try:
            return compiling.result()
        except CompilerFailed as exc:
            raise WorkerBusy(str(exc)) from None

    async def start(generation: Generation, disconnected: asyncio.Future) -> None:
        """Compile the grammar (unless the client leaves meanwhile: Cancelled), then hand the call to the engine;
        raises ProtocolError, GrammarError or WorkerBusy."""
        call = generation.call
        if call.rid in active:
            raise ProtocolError(f"a request with rid {call.rid!r} is already running")
        admit(state, starting=sum(not g.submitted for g in active.values()))
        grammar = None
        active[call.rid] = generation  # taken before the compile: a request with the same rid meanwhile is refused
        try:
            if call.grammar is not None:
                grammar = await compile_unless_left(call.grammar, disconnected)
        except BaseException:
            del active[call.rid]
            raise
        if generation.cancelled is not None:  # aborted while its grammar compiled: it never enters the engine
            generation.events.put_nowait(EngineEvent([], Finish("abort", message=generation.cancelled)))
            return
        generation.submitted = True
        loop = asyncio.get_running_loop()
        mailbox = mailboxes.get(loop) or mailboxes.setdefault(loop, LoopMailbox(loop))
        state.metrics.prompt_tokens.inc(len(call.input_ids))
        state.engine.submit(
            EngineRequest(
                rid=call.rid,
                input_ids=call.input_ids,
                params=call.sampling,
                grammar=grammar,
                logprobs=call.return_logprob,
                top_logprobs=call.top_logprobs_num,
                min_new_tokens=call.min_new_tokens,
                text=generation.output_text,
                emit=lambda event: mailbox.post(generation.events.put_nowait, event),
            )
        )

    async def generate(request: Request) -> Response:
        try:
            body = await request_json(request)
            parse = partial(parse_generate, body, vocab_size=model_vocab, context_length=context, encode=encode_text)
            call = await asyncio.to_thread(parse) if has_text_prompt(body) else parse()
            generation = Generation(call, state)
        except ProtocolError as exc:
            return _error(str(exc), exc.status)
        disconnected = watch_client(request)
        refused = await start_or_refusal(
            start, generation, disconnected, lambda message, status, _: _error(message, status)
        )
        if refused is not None:
            return refused
        if call.stream:
            return _EventStream(generation, lambda: _release(generation), disconnected)
        return await _collect(generation, disconnected)

    prompt_bound = text_bound(state.checkpoint.tokenizer)
    model_vocab, context = state.engine.model.vocab_size, state.engine.context_length

    def encode_text(text: str) -> list[int]:
        """A `text` prompt's ids (on a worker thread: the tokenizer releases the GIL, see encode_prompt_text)."""
        return encode_prompt_text(state.checkpoint.tokenizer, text, context, prompt_bound)

    async def _collect(generation: Generation, disconnected: asyncio.Future) -> Response:
        text, ids, payload = [], [], {}
        try:
            while not generation.done:
                event = await _next_event(generation, disconnected)
                if event is None:
                    return _error("client disconnected", 499)
                if event.error is not None:
                    return _error(event.error, 500)
                payload = generation.payload(event)
                text.append(payload["text"])
                ids.extend(payload["output_ids"])
            payload.update(text="".join(text), output_ids=ids)
            payload["meta_info"].update(generation.all_logprobs)
            return json_response(payload)
        finally:
            disconnected.cancel()
            _release(generation)

    def _release(generation: Generation) -> None:
        active.pop(generation.call.rid, None)
        if not generation.done:
            state.engine.abort(generation.call.rid, "client disconnected")

    def abort(rid: str, message: str) -> None:
        """Cancel the request `rid`: one not yet submitted (its grammar compiling) is marked, never submitted."""
        generation = active.get(rid)
        if generation is not None and not generation.submitted:
            generation.cancelled = message
        else:
            state.engine.abort(rid, message)

    async def abort_request(request: Request) -> Response:
        try:
            body = await request_json(request)
        except ProtocolError as exc:
            return _error(str(exc), exc.status)
        if not isinstance(body, dict):
            return _error('abort_request needs {"rid": str} or {"abort_all": true}')
        rid, abort_all = body.get("rid"), body.get("abort_all", False)
        if not isinstance(abort_all, bool):
            return _error("abort_all must be a boolean")
        if abort_all:  # SGLang's AbortReq: every request in flight
            for running in list(active):
                abort(running, "aborted by request")
        elif isinstance(rid, str):
            abort(rid, "aborted by request")
        else:
            return _error('abort_request needs {"rid": str} or {"abort_all": true}')
        return Response(status_code=200)

    async def health(_: Request) -> Response:
        return Response(status_code=200 if state.engine.is_alive() else 503)

    async def model_info(_: Request) -> Response:
        return json_response(
            {"model_path": state.model_path, "tokenizer_path": state.model_path, "is_generation": True}
        )

    async def server_info(_: Request) -> Response:
        stats = state.engine.stats
        head = state.engine.model.greedy_head
        return json_response(
            {
                "model_path": state.model_path,
                "max_running_requests": state.engine.max_batch,
                "context_length": state.engine.context_length,
                "internal_states": [
                    {
                        "running_requests": state.engine.active_requests(),
                        "decode_steps": stats.decode_steps,
                        "decode_tokens": stats.decode_tokens,
                        "decode_seconds": stats.decode_seconds,
                        "grammar_seconds": stats.grammar_seconds,
                        "prefill_tokens": stats.prefill_tokens,
                        "prefill_seconds": stats.prefill_seconds,
                        "prefix_cache_queries": state.engine.prefix_cache.queries,
                        "prefix_cache_hits": state.engine.prefix_cache.hits,
                        "threads": state.engine.threads,
                        "cuda_graphs": state.engine.decode_path(),
                        **state.engine.decode_counts(),
                        "greedy_head_rows": head.chosen if head is not None else 0,
                        "greedy_head_fallbacks": head.fallbacks if head is not None else 0,
                        "process_cpu_seconds": time.process_time(),
                    }
                ],
            }
        )

    async def metrics(_: Request) -> Response:
        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return Starlette(
        routes=[
            Route("/generate", generate, methods=["POST"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/abort_request", abort_request, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/get_model_info", model_info, methods=["GET"]),
            Route("/get_server_info", server_info, methods=["GET"]),
            *vllm_routes(state, start, lambda g, watch: _EventStream(g, lambda: _release(g), watch), watch_client),
        ]
    )


def watch_client(request: Request) -> asyncio.Future:
    """A future done once the client has gone away: one watcher from the request's start (its grammar compile) to
    its answer's end, whose owner cancels it."""
    return asyncio.ensure_future(wait_for_disconnect(request.receive))


class _EventStream(Response):
    """SSE of one generation that notices a client going away (`disconnected`, which it cancels at its end) and
    always runs `release`."""

    def __init__(self, generation: Generation, release: Callable[[], None], disconnected: asyncio.Future):
        self.status_code = 200
        self.raw_headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
        self.background = None
        self.generation = generation
        self.release = release
        self.disconnected = disconnected

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        disconnected = self.disconnected
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            generation = self.generation
            while not generation.done:
                event = await _next_event(generation, disconnected)
                if event is None:
                    return
                if event.error is not None:
                    generation.done = True
                    await _send_chunk(send, generation.error_frame(event.error))
                    break
                await _send_chunk(send, generation.frames(event))
            await _send_chunk(send, DONE_FRAME)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            disconnected.cancel()
            self.release()


async def _send_chunk(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _next_event(generation: Generation, disconnected: asyncio.Future) -> EngineEvent | None:
    """The generation's next engine event, or None once the client has gone away."""
    if not disconnected.done() and generation.events.empty():
        getter = asyncio.ensure_future(generation.events.get())
        await asyncio.wait({getter, disconnected}, return_when=asyncio.FIRST_COMPLETED)
        if getter.done():
            return getter.result()
        getter.cancel()
    return None if disconnected.done() else generation.events.get_nowait()
