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

import httpx
import orjson

from backends.base import Backend, BackendError, GenerateChunk, GenerateRequest, TokenLogprob

log = logging.getLogger(__name__)

_DATA = "data:"
_DONE = "[DONE]"
_JSON = {"content-type": "application/json"}


def generate_payload(request: GenerateRequest) -> dict[str, Any]:
    """The `/generate` body for `request`, in SGLang's field names."""
    s = request.sampling
    params: dict[str, Any] = {
        "max_new_tokens": s.max_new_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "min_p": s.min_p,
        "frequency_penalty": s.frequency_penalty,
        "presence_penalty": s.presence_penalty,
        "ignore_eos": s.ignore_eos,
        "skip_special_tokens": s.skip_special_tokens,
    }
    if s.stop_token_ids:
        params["stop_token_ids"] = list(s.stop_token_ids)
    if s.seed is not None:
        params["sampling_seed"] = s.seed
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


class SGLangBackend(Backend):
    """An SGLang-compatible server at `base_url`, reached over a keep-alive HTTP/1.1 pool."""

    def __init__(
        self,
        base_url: str,
        *,
        incremental: bool = False,
        connect_timeout: float = 5.0,
        health_timeout: float = 5.0,
        max_connections: int = 256,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.incremental = incremental
        self._health_timeout = health_timeout
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(None, connect=connect_timeout),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport,
        )
        self._aborts: set[asyncio.Task[None]] = set()

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        live = True  # the server may be working on `rid`: abort it unless it finished, refused or was never reached
        body = orjson.dumps(generate_payload(request))
        try:
            async with self._client.stream("POST", "/generate", content=body, headers=_JSON) as response:
                if response.status_code != 200:
                    live = False
                    raise _http_error(response.status_code, await response.aread())
                reader = _StreamReader(self.incremental)
                async for line in response.aiter_lines():
                    chunk = reader.line(line)
                    if chunk is not None and live:
                        live = chunk.finish_reason is None
                        yield chunk
                    if reader.done:
                        break
                if live:
                    raise BackendError("backend stream ended without a finish reason", retryable=True)
        except httpx.ConnectError as e:
            live = False
            raise BackendError(f"backend {self.base_url} unreachable: {e!r}", status=503, retryable=True) from e
        except httpx.TransportError as e:
            raise BackendError(f"backend {self.base_url} failed: {e!r}", status=503, retryable=True) from e
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
            await self._client.post("/abort_request", json={"rid": rid}, timeout=self._health_timeout)
        except httpx.HTTPError as e:  # best effort: closing the stream already tells the server
            log.debug("abort of %s failed: %r", rid, e)

    async def ready(self) -> bool:
        try:
            response = await self._client.get("/health", timeout=self._health_timeout)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def close(self) -> None:
        if self._aborts:
            await asyncio.wait(self._aborts, timeout=self._health_timeout)
        await self._client.aclose()


class _StreamReader:
    """Turns SSE lines of one `/generate` stream into GenerateChunks of new output only."""

    def __init__(self, incremental: bool):
        self.incremental = incremental
        self.done = False
        self._seen_ids = 0
        self._seen_logprobs = 0

    def line(self, line: str) -> GenerateChunk | None:
        if not line.startswith(_DATA):
            return None
        data = line[len(_DATA) :].strip()
        if data == _DONE:
            self.done = True
            return None
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise BackendError(f"backend sent invalid JSON in its stream: {e}") from None
        if not isinstance(event, dict):
            raise BackendError("backend sent a stream event that is not an object")
        if "error" in event:
            raise _event_error(event["error"])
        return self._chunk(event)

    def _chunk(self, event: dict[str, Any]) -> GenerateChunk:
        meta = event.get("meta_info") or {}
        ids = self._new(event.get("output_ids") or [], "_seen_ids")
        finish = meta.get("finish_reason")
        reason, matched = None, None
        if isinstance(finish, dict):
            reason = finish.get("type")
            if reason == "abort":
                status = finish.get("status_code")
                raise BackendError(
                    f"backend aborted the request: {finish.get('message') or 'no reason given'}",
                    status=status if isinstance(status, int) and 400 <= status < 600 else 503,
                    retryable=not (isinstance(status, int) and 400 <= status < 500),
                )
            if reason not in ("stop", "length"):
                raise BackendError(f"backend sent an unknown finish reason {finish!r}")
            matched = finish.get("matched") if isinstance(finish.get("matched"), int) else None
        return GenerateChunk(
            output_ids=ids,
            logprobs=self._logprobs(meta),
            finish_reason=reason,
            matched_stop=matched,
            prompt_tokens=int(meta.get("prompt_tokens") or 0),
            completion_tokens=int(meta.get("completion_tokens") or 0),
            cached_tokens=int(meta.get("cached_tokens") or 0),
        )

    def _new(self, items: list[Any], seen_attr: str) -> list[Any]:
        """The entries not seen before: all of them in incremental mode, the unseen tail otherwise."""
        if self.incremental:
            return list(items)
        seen = getattr(self, seen_attr)
        if len(items) < seen:
            raise BackendError("backend's cumulative stream went backwards")
        setattr(self, seen_attr, len(items))
        return items[seen:]

    def _logprobs(self, meta: dict[str, Any]) -> list[TokenLogprob] | None:
        tokens = meta.get("output_token_logprobs")
        if tokens is None:
            return None
        top = meta.get("output_top_logprobs") or []
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


def _http_error(status: int, body: bytes) -> BackendError:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    message = body.decode("utf-8", "replace")[:500]
    if isinstance(parsed, dict):
        error = parsed.get("error", parsed)
        message = str(error.get("message", message)) if isinstance(error, dict) else str(error)
    return BackendError(f"backend refused the request ({status}): {message}", status=status, retryable=status >= 500)


def _event_error(error: Any) -> BackendError:
    message = error.get("message", error) if isinstance(error, dict) else error
    return BackendError(f"backend failed: {message}")
