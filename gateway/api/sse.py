"""Server-sent event streams as OpenAI streams them (frames from backends.asgi, shared with the worker)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.responses import StreamingResponse


def sse_response(events: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> StreamingResponse:
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no", **(headers or {})},
    )
