"""Request bodies: read up to a byte limit, parsed as JSON."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from backends.asgi import BodyTimedOut, BodyTooLarge, ClientLeft, read_json_body
from gateway.errors import CLIENT_CLOSED, APIError, invalid

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body; 413 past `limit` bytes, 400 when it is not JSON, 499 (for the logs: nobody reads it)
    when the client leaves before its body ended, 408 when it stalled in it (for the logs too: the server answered
    408 itself, backends/client_timeouts.py); 415 for a content coding (gzip ...) it would have to decode, refused
    before the body is read."""
    for name, value in request.scope["headers"]:  # the raw list: Starlette's Headers cost ~10 K instructions here
        if name == b"content-encoding" and (coding := value.decode("latin-1").strip().lower()) not in ("", "identity"):
            raise APIError(
                f"the body's content-encoding {coding!r} is not accepted: send the JSON uncompressed",
                status=415,
                param=None,
                code="unsupported_media_type",
            )
    try:
        return await read_json_body(request.scope, request.receive, limit)
    except BodyTooLarge:
        raise _too_large(limit) from None
    except BodyTimedOut:  # the server answered 408 already (this answer goes nowhere): the records say 408 too
        raise APIError("the request body paused or came too slowly", status=408, code="request_timeout") from None
    except ClientLeft:
        raise APIError("the client left before its body ended", status=CLIENT_CLOSED, code="client_closed") from None
    except orjson.JSONDecodeError as e:
        raise invalid(f"the body is not valid JSON: {e}", None, "invalid_json") from None


def _too_large(limit: int) -> APIError:
    return APIError(f"the body is larger than {limit} bytes", status=413, code="request_too_large")
