"""What both HTTP servers here (the gateway and the bundled worker) write: JSON bodies, SSE frames, and a watch
for the client going away."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive

DONE_FRAME = b"data: [DONE]\n\n"
"""The last frame of an OpenAI-style (and SGLang-style) event stream."""


dumps: Callable[[Any], bytes] = orjson.dumps
"""Compact JSON bytes: orjson's own function (no Python call of ours around it, once per frame of every stream)."""


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(value), status_code=status, headers=headers, media_type="application/json")


def sse_frame(value: Any) -> bytes:
    """One `data: {json}` server-sent event."""
    return b"data: " + dumps(value) + b"\n\n"


async def wait_for_disconnect(receive: Receive) -> None:
    """Return once the ASGI server reports that the client has gone away."""
    while (await receive())["type"] != "http.disconnect":
        pass
