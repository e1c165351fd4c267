"""Server-sent event streams as OpenAI streams them (frames from backends.asgi, shared with the worker)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from backends.asgi import wait_for_disconnect

BodyWriter = Callable[[Send], Awaitable[None]]
"""Sends a stream's body messages with the `send` it is given, the last one with `more_body` false."""


class SSEResponse(Response):
    """An event stream whose body one coroutine writes straight to `send` (no async iterator between the answer's
    loop and the socket: one frame resume less per step), with Starlette's StreamingResponse headers; the client's
    leaving is watched by one plain task that cancels the stream."""

    media_type = "text/event-stream"

    def __init__(self, body: BodyWriter, headers: dict[str, str] | None = None):
        self.status_code = 200
        self.background = None
        self._write_body = body
        self.init_headers({"cache-control": "no-cache", "x-accel-buffering": "no", **(headers or {})})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = asyncio.current_task()
        assert stream is not None
        streaming = True

        def client_left(watcher: asyncio.Task[None]) -> None:
            if streaming and not watcher.cancelled():
                stream.cancel()

        watcher = asyncio.create_task(wait_for_disconnect(receive))
        watcher.add_done_callback(client_left)
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            await self._write_body(send)
        except asyncio.CancelledError:
            if watcher.cancelled() or not watcher.done():
                raise  # cancelled from outside
            stream.uncancel()  # the client left: the answer ends here, as Starlette's does
        finally:
            streaming = False
            watcher.cancel()
