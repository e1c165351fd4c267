"""Server-sent event streams as OpenAI streams them (frames from backends.asgi, shared with the worker)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.api.disconnect import ClientWatch

SSE_HEADERS = [
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
    (b"content-type", b"text/event-stream; charset=utf-8"),
]
"""What Starlette's StreamingResponse sent for these headers and media type, byte for byte."""


class SSEResponse(Response):
    """An event stream's answer: the head, then each item of `events` as one body message; a client that leaves
    (seen by `watch`, which this answer stops when it ends) ends it quietly and closes `events`. A Response as
    Starlette's StreamingResponse is one: its own constructor, its own `__call__`."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes], watch: ClientWatch):
        self.events = events
        self.watch = watch
        self.status_code = 200
        self.raw_headers = list(SSE_HEADERS)  # its own: `headers` edits it in place

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if not self.watch.left:
                with self.watch:
                    await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
                    async for chunk in self.events:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.watch.stop()
            await self.events.aclose()  # type: ignore[attr-defined]
