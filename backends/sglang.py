"""Client for SGLang's native `POST /generate` (and the bundled worker, which speaks the same dialect).

Requests carry token ids and SGLang's own sampling_params names (it rejects
unknown keys). Streams are read in either SGLang mode: cumulative `output_ids`
(the default) or deltas (`--incremental-streaming-output`, `incremental=True`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import orjson

from backends.base import BackendError, GenerateChunk, GenerateRequest, MalformedStream, TokenLogprob
from backends.http_backend import (
    SHAPE_ERRORS,
    SSE_DONE,
    HTTPBackend,
    batch_chunk,
    refused,
    shape_error,
    stream_event,
    token_ids,
)
from backends.typed_event import NO_RAW, Int, TypedEvent, raw_value, typed_event

log = logging.getLogger(__name__)

_DELTAS_UNEXPECTED = (
    "backend streams each event's new output_ids only (SGLang's --incremental-streaming-output, or a bundled "
    "worker): set `incremental: true` on this backend"
)
"""Read as cumulative, such a stream lost every id after the first event's, and ended as if cut by max_tokens."""


def generate_payload(request: GenerateRequest) -> dict[str, Any]:
    """The `/generate` body for `request`, in SGLang's field names."""
    params = request.sampling.wire_fields(
        max_tokens="max_new_tokens", seed="sampling_seed", min_tokens="min_new_tokens"
    )
    if request.grammar is not None:
        params[request.grammar.kind] = request.grammar.text
    body: dict[str, Any] = {
        "input_ids": request.input_ids,
        "sampling_params": params,
        "stream": True,
        "rid": request.rid,
    }
    if request.logprobs:
        body["return_logprob"] = True
        body["top_logprobs_num"] = request.top_logprobs
    return body


class SGLangBackend(HTTPBackend):
    """An SGLang-compatible server; `incremental`: it streams deltas (`--incremental-streaming-output`)."""

    def __init__(self, base_url: str, *, incremental: bool = False, **http: Any):
        super().__init__(base_url, **http)
        self.incremental = incremental
        self._aborts: set[asyncio.Task[None]] = set()

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        live = True  # the server may be working on `rid`: abort it unless it finished, refused or was never reached
        accepted = False
        try:
            posted = self._stream_lines("/generate", orjson.dumps(generate_payload(request)))
            async with posted as batches:
                accepted = True
                reader = _StreamReader(self.incremental)
                async for lines in batches:
                    chunk, failure = batch_chunk(lines, reader.chunks, reader.ended)
                    live = not reader.finished
                    if failure is None and not live:
                        posted.read_rest_later()  # the caller may stop at the finish: the connection reads the rest
                    if chunk is not None:
                        yield chunk
                    if failure is not None:
                        raise failure
                    if not live or reader.done:  # `reader.ended()`, without a call per read
                        break
                if live:
                    raise BackendError("backend stream ended without a finish reason", retryable=True)
        except BackendError:
            live = live and accepted  # a refusal or a failed connection leaves nothing running there
            raise
        finally:
            if live:
                self._abort_later(request.rid)

    def _abort_later(self, rid: str) -> None:
        """Ask the server to drop `rid`, without making the caller (maybe being cancelled) wait."""
        task = asyncio.get_running_loop().create_task(self._abort(rid))
        self._aborts.add(task)
        task.add_done_callback(self._aborts.discard)

    async def _abort(self, rid: str) -> None:
        try:
            await self.call("POST", "/abort_request", orjson.dumps({"rid": rid}))
        except BackendError as e:  # best effort: closing the stream already tells the server
            log.debug("abort of %s failed: %r", rid, e)

    async def close(self) -> None:
        if self._aborts:
            await asyncio.wait(self._aborts, timeout=self._health_timeout)
        await super().close()


class _Finish(msgspec.Struct, gc=False):
    type: str
    matched: Int | str | None = None


class _Meta(msgspec.Struct, gc=False):
    finish_reason: _Finish | None = None
    prompt_tokens: Int = 0  # (a null count, as any field of another type, goes the general way: no union to check)
    completion_tokens: Int = 0
    cached_tokens: Int = 0
    output_token_logprobs: msgspec.Raw = NO_RAW
    output_top_logprobs: msgspec.Raw = NO_RAW


class _Event(TypedEvent, gc=False):
    """The fields of a `/generate` event the reader uses (backends/typed_event.py)."""

    output_ids: list[Int] = msgspec.field(default_factory=list)
    meta_info: _Meta | None = None


_decode = msgspec.json.Decoder(_Event).decode


class _StreamReader:
    """Turns SSE lines of one `/generate` stream into GenerateChunks of new output only."""

    def __init__(self, incremental: bool):
        self.incremental = incremental
        self.done = False
        self.finished = False
        """A chunk with a finish reason was read (what follows it is not parsed)."""
        self._seen_ids = 0
        self._seen_logprobs = 0

    def ended(self) -> bool:
        return self.finished or self.done

    def chunks(self, line: bytes) -> list[GenerateChunk]:
        """The new output of one line (none, or one chunk)."""
        typed = typed_event(line, _decode)
        try:
            chunk = None if typed is None else self._typed_chunk(typed)
            if chunk is None:
                event = stream_event(line)
                if type(event) is not dict:
                    if event == SSE_DONE:
                        self.done = True
                    return []
                chunk = self._chunk(event)
        except SHAPE_ERRORS as e:
            raise shape_error(e) from None
        if chunk.finish_reason is not None:
            self.finished = True
        return [chunk]

    def _typed_chunk(self, event: _Event) -> GenerateChunk | None:
        """The chunk of a typed event with a stop, a length or no finish; None: the general read reads it (an abort's
        status and message, an unknown reason, logprobs orjson refuses)."""
        meta = event.meta_info
        if meta is None:
            return None
        finish = meta.finish_reason
        if finish is not None and finish.type != "stop" and finish.type != "length":
            return None
        tokens = top = None
        if meta.output_token_logprobs or meta.output_top_logprobs:  # (no call for the usual event without them)
            (tokens, read), (top, top_read) = raw_value(meta.output_token_logprobs), raw_value(meta.output_top_logprobs)
            if not (read and top_read):
                return None
        ids = event.output_ids
        return self._made(ids, finish, tokens, top, meta.prompt_tokens, meta.completion_tokens, meta.cached_tokens)

    def _chunk(self, event: dict[str, Any]) -> GenerateChunk:
        meta = event.get("meta_info") or {}
        if type(meta) is not dict:
            raise MalformedStream("backend sent meta_info that is not an object")
        ids = token_ids(event.get("output_ids") or [], "output_ids")
        get = meta.get
        return self._made(
            ids,
            get("finish_reason"),
            get("output_token_logprobs"),
            get("output_top_logprobs"),
            get("prompt_tokens"),
            get("completion_tokens"),
            get("cached_tokens"),
        )

    def _made(
        self, ids: list[int], finish: Any, tokens: Any, top: Any, prompt: Any, completion: Any, cached: Any
    ) -> GenerateChunk:
        """The chunk of an event's values (a general read's, or a typed read's: `finish` then a `_Finish`)."""
        if not self.incremental:
            if type(completion) is int and completion > len(ids):  # cumulative ids: all the tokens counted so far
                raise MalformedStream(_DELTAS_UNEXPECTED)
            ids = self._new(ids, "_seen_ids")
        reason, matched = None, None
        if type(finish) is _Finish:
            reason, matched = finish.type, finish.matched if type(finish.matched) is int else None
        elif type(finish) is dict:
            reason = finish.get("type")
            if reason == "abort":  # SGLang's FINISH_ABORT: 400 the request's own; 500, 503 or none the server's
                status = finish.get("status_code")
                status = status if type(status) is int and 400 <= status < 600 else 503
                raise refused(status, finish.get("message") or "no reason given", "backend aborted the request")
            if reason not in ("stop", "length"):
                raise MalformedStream(f"backend sent an unknown finish reason {finish!r}")
            matched = finish.get("matched") if isinstance(finish.get("matched"), int) else None
        logprobs = None if tokens is None else self._logprobs(tokens, top)
        return GenerateChunk(  # positional: the dataclass's field order (keywords cost more per event)
            ids,
            logprobs,
            reason,
            matched,
            # `int(n or 0)`, with no call for what is an int already (every event's counts, usually)
            prompt if type(prompt) is int else int(prompt or 0),
            completion if type(completion) is int else int(completion or 0),
            cached if type(cached) is int else int(cached or 0),
        )

    def _new(self, items: list[Any], seen_attr: str) -> list[Any]:
        """The entries not seen before: all of them in incremental mode, the unseen tail otherwise."""
        if self.incremental:
            return list(items)
        seen = getattr(self, seen_attr)
        if len(items) < seen:
            raise MalformedStream("backend's cumulative stream went backwards")
        setattr(self, seen_attr, len(items))
        return items[seen:]

    def _logprobs(self, tokens: Any, top: Any) -> list[TokenLogprob]:
        top = top or []
        start = 0 if self.incremental else self._seen_logprobs
        new = self._new(tokens, "_seen_logprobs")
        out = []
        for i, entry in enumerate(new):
            alternatives = top[start + i] if start + i < len(top) else None
            out.append(
                TokenLogprob(
                    token_id=int(entry[1]),
                    logprob=float(entry[0]),
                    top=[(int(a[1]), float(a[0])) for a in alternatives or ()],
                )
            )
        return out
