"""A request in flight on the worker: engine events in, SSE frames of SGLang's dialect out (vLLM's builds on it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from starlette.responses import Response

from backends.asgi import sse_frame
from backends.checkpoint import Checkpoint
from backends.detokenizer import Detokenizer, added_tokens
from backends.worker.engine import Engine, EngineEvent
from backends.worker.grammar import Cancelled, GrammarCache, GrammarError
from backends.worker.metrics import WorkerMetrics
from backends.worker.output_text import OutputText
from backends.worker.protocol import GenerateCall, ProtocolError, finish_reason, logprob_fields


@dataclass
class WorkerState:
    checkpoint: Checkpoint
    engine: Engine
    grammars: GrammarCache
    model_path: str
    max_waiting: int = 64
    """Requests that may wait for a batch slot; past it a new one is refused with 503 (WorkerBusy)."""
    metrics: WorkerMetrics = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = WorkerMetrics(self.model_path, self.engine, self.grammars)


class WorkerBusy(Exception):
    """The waiting queue is full: the client should retry later or elsewhere (503 with retry-after)."""

    RETRY_AFTER_S = 1


Start = Callable[["Generation", asyncio.Future], Awaitable[None]]
"""Hands a generation to the engine (its grammar compiled first), given the client's watch."""
Refusal = Callable[[str, int, str], Response]
"""A dialect's error answer: (message, status, vLLM's error type name)."""


async def start_or_refusal(
    start: Start, generation: Generation, disconnected: asyncio.Future, refusal: Refusal
) -> Response | None:
    """Start `generation`: None once started, else the dialect's answer to why it could not (400 for a bad request
    or grammar, 503 + retry-after when busy, 499 when the client left); the watch is cancelled then."""
    try:
        await start(generation, disconnected)
    except BaseException as exc:
        disconnected.cancel()
        if isinstance(exc, ProtocolError):
            return refusal(str(exc), exc.status, "BadRequestError")
        if isinstance(exc, GrammarError):
            return refusal(str(exc), 400, "BadRequestError")
        if isinstance(exc, WorkerBusy):
            response = refusal(str(exc), 503, "ServiceUnavailableError")
            response.headers["retry-after"] = str(WorkerBusy.RETRY_AFTER_S)
            return response
        if isinstance(exc, Cancelled):
            return refusal("client disconnected", 499, "ClientDisconnected")
        raise
    return None


def admit(state: WorkerState, starting: int = 0) -> None:
    """Raise WorkerBusy when no batch slot is free for a new request and `state.max_waiting` requests already
    wait for one (not counting those on their way into a free one); `starting` requests admitted but not yet
    submitted (their grammars compiling) wait as much as the engine's."""
    load, slots = state.engine.load(), state.engine.max_batch
    load = replace(load, waiting=load.waiting + starting)
    if not load.has_room(slots, state.max_waiting):
        raise WorkerBusy(f"the worker is overloaded: {load.queued(slots)} requests wait for a batch slot")


class Generation:
    """One request in flight: receives engine events on the event loop, shapes SGLang responses."""

    def __init__(self, call: GenerateCall, state: WorkerState):
        self.call = call
        self.events: asyncio.Queue[EngineEvent] = asyncio.Queue()
        added, special = added_tokens(state.checkpoint.tokenizer)
        self.detokenizer = Detokenizer(state.checkpoint.tokenizer, added)
        self._tokenizer = state.checkpoint.tokenizer
        self.output_text = None
        """With stop strings the engine thread detokenizes (it must stop on the token completing one)."""
        if call.stop:
            unarmed = call.min_new_tokens if call.stop_strings_wait_for_min else 0
            self.output_text = OutputText(
                self.detokenizer, call.stop, keep_stop=call.no_stop_trim, unarmed_tokens=unarmed
            )
        self.skipped = special if call.skip_special_tokens else frozenset()
        self.completion_tokens = 0
        self.cached_tokens = 0
        self.started = time.perf_counter()
        self._metrics = state.metrics
        self.done = False
        self.all_logprobs: dict[str, list] = {}
        self.submitted = False
        """Handed to the engine; before that an abort is held here (`cancelled`), not sent to the engine."""
        self.cancelled: str | None = None

    def payload(self, event: EngineEvent) -> dict:
        """The SGLang object for this event's new tokens (incremental text and ids)."""
        ids = [t.token_id for t in event.tokens]
        if ids:
            if not self.completion_tokens:
                self._metrics.ttft.observe(time.perf_counter() - self.started)
            self._metrics.generation_tokens.inc(len(ids))
        self.completion_tokens += len(ids)
        self.cached_tokens = max(self.cached_tokens, event.cached_tokens)
        self.done = event.finish is not None
        meta = {
            "id": self.call.rid,
            "finish_reason": finish_reason(event.finish),
            "prompt_tokens": len(self.call.input_ids),
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
        }
        if self.call.return_logprob:
            token_text = self.decoded_token if self.call.return_text_in_logprobs else None
            fields = logprob_fields(event.tokens, self.call.top_logprobs_num, token_text)
            meta.update(fields)
            for key, values in fields.items():
                self.all_logprobs.setdefault(key, []).extend(values)
        return {"text": self._text(event), "output_ids": ids, "meta_info": meta}

    def decoded_token(self, token_id: int) -> str:
        """One token's text as SGLang's logprobs give it: decoded alone, special tokens kept."""
        return self._tokenizer.decode([token_id], skip_special_tokens=False)

    def _text(self, event: EngineEvent) -> str:
        """The text the event's tokens complete (all that is held back once the generation is done), without
        the stop token unless the request keeps it, special tokens skipped when the request asked."""
        pieces = event.pieces
        if pieces is None:
            ids = [t.token_id for t in event.tokens]
            finish = event.finish
            if finish is not None and finish.type == "stop" and not self.call.no_stop_trim:
                ids = [i for i in ids if i != finish.matched]
            pieces = self.detokenizer.feed(ids) + (self.detokenizer.flush() if self.done else [])
        return "".join(p.text for p in pieces if p.token_id not in self.skipped)

    def frames(self, event: EngineEvent) -> bytes:
        """The SSE bytes sent for one engine event."""
        return sse_frame(self.payload(event))

    def error_frame(self, message: str) -> bytes:
        """The SSE bytes of a mid-stream error."""
        return sse_frame({"error": {"message": message}})
