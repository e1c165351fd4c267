"""Server-sent event streams as OpenAI streams them (frames from backends.asgi, shared with the worker)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.api.disconnect import ClientWatch
from gateway.api.front import more_body_send
from gateway.observability.requests import note_client_closed

SSE_HEADERS = [
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
    (b"content-type", b"text/event-stream; charset=utf-8"),
]
"""What Starlette's StreamingResponse sent for these headers and media type, byte for byte."""

BodyWriter = Callable[[Send, Send], Awaitable[None]]
"""Sends a stream's body messages: those with `more_body` true with the first `send` it is given, the last one
(`more_body` false) with the second."""


class SSEResponse(Response):
    """An event stream's answer: the head, then at once the body `write_body` sends straight to `send` (the loop that
    reads the steps frames and sends them: no async iterator between it and the socket); a client that leaves (seen by
    `watch`, which this answer stops when it ends) ends it quietly, and `events`, what the body reads, is closed
    however it ends. A Response as Starlette's StreamingResponse is one: its own constructor, its own `__call__`."""

    media_type = "text/event-stream"

    def __init__(self, write_body: BodyWriter, events: AsyncIterator[Any], watch: ClientWatch):
        self.write_body = write_body
        self.events = events
        self.watch = watch
        self.status_code = 200
        self.raw_headers = list(SSE_HEADERS)  # its own: `headers` edits it in place

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if not self.watch.left:
                with self.watch:
                    await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
                    # in this step: the writer sends its first message now, its later ones from a task of its own
                    # (api/streaming.py::_stream; a client that leaves cancels this task, and so that one)
                    await self.write_body(more_body_send(scope, send), send)
            if self.watch.left:
                note_client_closed()
        finally:
            self.watch.stop()
            await self.events.aclose()  # type: ignore[attr-defined]
