"""A small real HTTP server that speaks SGLang's published `/generate` contract, for client and app tests.

SGLang itself cannot run here. Every request body is decoded with SGLang's own
contract types (unknown sampling keys are refused with 400, as SGLang does) and
every event it sends is checked against them before it goes out. What it
generates is scripted per test: a list of token ids, played back one per event.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.gateway.sglang_contract import ContractError, api_types


@dataclass
class Script:
    """What the stand-in generates for one request."""

    ids: list[int] = field(default_factory=list)
    hold_after: int | None = None
    """Send this many tokens, then nothing more until the client goes away."""
    error_after: int | None = None
    """Send this many tokens, then an error event."""
    error_code: int | None = None
    """The error event's `code`, the status of the failure: SGLang 0.5.23's http_server writes one for a request's
    ValueError, 400; None leaves it out (its contract allows that), a failure of no known kind."""
    abort_after: int | None = None
    """Send this many tokens, then a finish of type abort (SGLang's FINISH_ABORT) with `abort_status`."""
    abort_status: int | None = None
    """The abort's status_code: 400 the request's own, 500 or 503 the server's, None a plain abort ("Aborted")."""
    garbage_after: int | None = None
    """Send this many tokens, then `garbage` (bytes no contract checks), then end the stream."""
    garbage: bytes = b"data: {not json\n\n"
    cut_after: int | None = None
    """Send this many tokens, then drop the connection: no finish, no end of the HTTP body."""
    delay: float = 0.0
    """Seconds to wait before each token."""
    refuse: int | None = None
    """Answer with this HTTP status and an error body instead of a stream."""
    cached_tokens: int = 0
    """The prompt tokens every event reports as read from the prefix cache."""


class ConnectionCut(Exception):
    """Raised inside a stream to make uvicorn drop the connection mid-body."""


class _QuietCuts(logging.Filter):
    """Keeps uvicorn from logging the scripted `ConnectionCut` as an application error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], ConnectionCut))


logging.getLogger("uvicorn.error").addFilter(_QuietCuts())


class SGLangStandIn:
    """The server's state: the script to play, and what it saw (bodies, aborts, closed and open streams)."""

    def __init__(self, incremental: bool):
        self.incremental = incremental
        self.script: Callable[[dict[str, Any]], Script] = lambda body: Script()
        self.healthy = True
        self.health_delay = 0.0
        """Seconds /health takes to answer (a busy server)."""
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        """The headers of each accepted /generate request."""
        self.received = threading.Semaphore(0)
        """Released once per accepted /generate request."""
        self.aborted: defaultdict[str, threading.Event] = defaultdict(threading.Event)
        self.closed: defaultdict[str, threading.Event] = defaultdict(threading.Event)
        self.streaming: set[str] = set()
        """Rids whose stream is open now."""
        self.app = Starlette(
            routes=[
                Route("/generate", self._generate, methods=["POST"]),
                Route("/abort_request", self._abort, methods=["POST"]),
                Route("/health", self._health, methods=["GET"]),
            ]
        )

    async def _health(self, request: Request) -> Response:
        await asyncio.sleep(self.health_delay)
        return Response(status_code=200 if self.healthy else 503)

    async def _abort(self, request: Request) -> Response:
        rid = api_types.AbortRequest.from_json_value(orjson.loads(await request.body())).rid
        self.aborted[rid].set()
        return JSONResponse({})

    async def _generate(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        try:
            parsed = api_types.GenerateRequest.from_json_value(body)
        except ContractError as e:
            return JSONResponse({"error": {"message": str(e)}}, status_code=400)
        assert parsed.stream and parsed.input_ids and parsed.rid, "the gateway always streams token ids under a rid"
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        self.received.release()
        script = self.script(body)
        if script.refuse is not None:
            return JSONResponse({"error": {"message": "refused by the script"}}, status_code=script.refuse)
        return StreamingResponse(self._events(parsed, script), media_type="text/event-stream")

    async def _events(self, request: Any, script: Script) -> AsyncIterator[bytes]:
        params = request.sampling_params
        stop_ids = set() if params.ignore_eos else set(params.stop_token_ids or ())
        sent: list[int] = []
        self.streaming.add(request.rid)
        try:
            for token in script.ids[: params.max_new_tokens]:
                if script.hold_after is not None and len(sent) == script.hold_after:
                    await asyncio.Event().wait()
                if script.error_after is not None and len(sent) == script.error_after:
                    yield _event(api_types.GenerateStreamError, _error_event("scripted failure", script.error_code))
                    break
                if script.abort_after is not None and len(sent) == script.abort_after:
                    yield self._output(request, sent, _abort(script.abort_status), new=0, cached=script.cached_tokens)
                    break
                if script.garbage_after is not None and len(sent) == script.garbage_after:
                    yield script.garbage
                    return
                if script.cut_after is not None and len(sent) == script.cut_after:
                    raise ConnectionCut(request.rid)
                await asyncio.sleep(script.delay)
                sent.append(token)
                finish = None
                if token in stop_ids:
                    finish = {"type": "stop", "matched": token}
                elif len(sent) == params.max_new_tokens:
                    finish = {"type": "length", "length": len(sent)}
                yield self._output(request, sent, finish, cached=script.cached_tokens)
                if finish:
                    break
            else:
                yield self._output(request, sent, {"type": "stop", "matched": None}, new=0, cached=script.cached_tokens)
            yield b"data: [DONE]\n\n"
        finally:
            self.streaming.discard(request.rid)
            self.closed[request.rid].set()

    def _output(self, request: Any, sent: list[int], finish: dict | None, new: int = 1, cached: int = 0) -> bytes:
        shown = sent[len(sent) - new :] if self.incremental else sent
        meta: dict[str, Any] = {
            "id": request.rid,
            "finish_reason": finish,
            "prompt_tokens": len(request.input_ids),
            "completion_tokens": len(sent),
            "cached_tokens": cached,
        }
        if request.return_logprob:
            meta["output_token_logprobs"] = [[fake_logprob(t), t, None] for t in shown]
            meta["output_top_logprobs"] = [
                [[fake_logprob(t) - k, t + k, None] for k in range(request.top_logprobs_num or 0)] for t in shown
            ]
        return _event(api_types.GenerateResponse, {"text": "", "output_ids": shown, "meta_info": meta})


def _error_event(message: str, code: int | None) -> dict[str, Any]:
    """An error event; with a code, SGLang 0.5.23's (http_server.py's stream_results, on a request's ValueError)."""
    if code is None:
        return {"error": {"message": message}}
    return {"error": {"message": message, "type": "invalid_request_error", "code": code, "retryable": False}}


def _abort(status: int | None) -> dict[str, Any]:
    """SGLang's FINISH_ABORT.to_json(): a plain abort says "Aborted" with no status."""
    if status is None:
        return {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
    kind = "BadRequestError" if status == 400 else "InternalServerError"
    return {"type": "abort", "message": f"scripted abort ({status})", "status_code": status, "err_type": kind}


def fake_logprob(token_id: int) -> float:
    """The logprob the stand-in reports for a token (so tests can check the pass-through)."""
    return -(token_id % 7) / 8


def _event(contract: Any, value: dict[str, Any]) -> bytes:
    contract.from_json_value(value)  # what goes out must match SGLang's published contract
    return b"data: " + orjson.dumps(value) + b"\n\n"
