"""Server-sent events framing as OpenAI streams use it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import StreamingResponse

from gateway.api.json_response import dumps

DONE = b"data: [DONE]\n\n"


def event(value: Any) -> bytes:
    """One `data: {json}` event."""
    return b"data: " + dumps(value) + b"\n\n"


def sse_response(events: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> StreamingResponse:
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no", **(headers or {})},
    )
