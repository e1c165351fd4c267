"""Request bodies: read up to a byte limit, parsed as JSON; a body declared as another media type is refused unread.

Content-Type (every POST door): `application/json`, with any parameters (`; charset=utf-8`: vLLM's
`validate_json_request` takes the media type before the `;`, and OpenAI's refusal of a charset was a bug it owned,
openai/openai-openapi#194), or a `+json` type (FastAPI's rule, which SGLang's routes follow); a body sent with no
Content-Type is read as JSON too (FastAPI, so SGLang; `requests.post(data=...)` sends none). Any other type
(`text/plain`, a form: what `curl -d` sends without `-H`) is a 400 `unsupported_content_type` in OpenAI's words
(its API answers so, openai/openai-python#2749; vLLM answers 400 as well), in each door's shape."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from backends.asgi import BodyTimedOut, BodyTooLarge, ClientLeft, read_json_body
from backends.exact_json import WideInteger
from gateway.errors import CLIENT_CLOSED, APIError, invalid, wide_integer

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body; 413 past `limit` bytes, 400 when it is not JSON, 499 (for the logs: nobody reads it)
    when the client leaves before its body ended, 408 when it stalled in it (for the logs too: the server answered
    408 itself, backends/client_timeouts.py); 415 for a content coding (gzip ...) it would have to decode, and 400
    for a Content-Type other than JSON's (above), both refused before the body is read."""
    for name, value in request.scope["headers"]:  # the raw list: Starlette's Headers cost ~10 K instructions here
        if name == b"content-encoding" and (coding := value.decode("latin-1").strip().lower()) not in ("", "identity"):
            raise APIError(
                f"the body's content-encoding {coding!r} is not accepted: send the JSON uncompressed",
                status=415,
                param=None,
                code="unsupported_media_type",
            )
        if name == b"content-type" and value != b"application/json" and not _is_json(value):
            raise _not_json(value.decode("latin-1"))
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
    except WideInteger as e:  # orjson would make it a float: a changed value
        raise wide_integer(e.place or None, f"'{e.place}'" if e.place else "the body") from None


def _is_json(content_type: bytes) -> bool:
    """Whether a Content-Type names JSON: `application/json` or `application/<anything>+json`, any parameters; an
    empty one is as none (FastAPI's)."""
    media = content_type.split(b";", 1)[0].strip().lower()
    return media in (b"", b"application/json") or (media.startswith(b"application/") and media.endswith(b"+json"))


def _not_json(content_type: str) -> APIError:
    """OpenAI's refusal of a body of another media type (400 `unsupported_content_type`, `param` null)."""
    shown = content_type if len(content_type) <= 100 else content_type[:100] + "..."
    return APIError(
        f"Unsupported content type: {shown!r}. This API method only accepts 'application/json' requests, but you "
        f"specified the header 'Content-Type: {shown}'. Please try again with a supported content type.",
        code="unsupported_content_type",
    )


def _too_large(limit: int) -> APIError:
    return APIError(f"the body is larger than {limit} bytes", status=413, code="request_too_large")
