"""What both HTTP servers here (the gateway and the bundled worker) write: JSON bodies, SSE frames, and a watch
for the client going away."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope

from backends.exact_json import loads

DONE_FRAME = b"data: [DONE]\n\n"
"""The last frame of an OpenAI-style (and SGLang-style) event stream."""


dumps: Callable[[Any], bytes] = orjson.dumps
"""Compact JSON bytes: orjson's own function (no Python call of ours around it, once per frame of every stream)."""


class BodyTooLarge(Exception):
    """The request body is longer than the server takes (HTTP 413)."""


class ClientLeft(Exception):
    """The client went away before its request body ended."""


class BodyTimedOut(ClientLeft):
    """The request body stopped coming, or came too slowly: the server cut it and answered 408 itself
    (backends/client_timeouts.py); the app's own answer goes nowhere, but its logs and metrics should say 408."""


BODY_TIMED_OUT = "body_timed_out"
"""The scope key the server sets (true) on a request whose body it cut for stalling (a 408 already sent)."""


async def read_json_body(scope: Scope, receive: Receive, limit: int) -> Any:
    """The request's body parsed as JSON (orjson.JSONDecodeError when it is not; WideInteger for an integer past 64
    bits, backends/exact_json.py): BodyTooLarge past `limit` bytes,
    by its content-length before any is read, else as the bytes arrive (chunked bodies too); ClientLeft when the
    client goes away before the body ends (BodyTimedOut when the server cut it for stalling)."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise BodyTooLarge(limit)
    body = bytearray()
    while True:  # what Request.stream() does, without an async generator per request
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BodyTimedOut if scope.get(BODY_TIMED_OUT) else ClientLeft
        body += message.get("body", b"")
        if len(body) > limit:
            raise BodyTooLarge(limit)
        if not message.get("more_body", False):
            return loads(body)


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(value), status_code=status, headers=headers, media_type="application/json")


def sse_frame(value: Any) -> bytes:
    """One `data: {json}` server-sent event."""
    return b"data: " + dumps(value) + b"\n\n"


async def wait_for_disconnect(receive: Receive) -> None:
    """Return once the ASGI server reports that the client has gone away."""
    while (await receive())["type"] != "http.disconnect":
        pass
