"""JSON bodies serialized with orjson."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response


def dumps(value: Any) -> bytes:
    """Compact JSON bytes; non-str dict keys and numpy-free plain data only."""
    return orjson.dumps(value)


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(value), status_code=status, headers=headers, media_type="application/json")
