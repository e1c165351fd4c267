"""Server-sent event streams as OpenAI streams them (frames from backends.asgi, shared with the worker)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from backends.asgi import wait_for_disconnect


class SSEResponse(StreamingResponse):
    """Starlette's StreamingResponse (same headers, same messages), with the client's leaving watched by one plain
    task that cancels the stream, instead of an anyio task group of two tasks per answer."""

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
            await self.stream_response(send)
        except asyncio.CancelledError:
            if watcher.cancelled() or not watcher.done():
                raise  # cancelled from outside
            stream.uncancel()  # the client left: the answer ends here, as Starlette's does
        finally:
            streaming = False
            watcher.cancel()


def sse_response(events: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> SSEResponse:
    return SSEResponse(
        events,
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no", **(headers or {})},
    )
