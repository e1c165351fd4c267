"""Errors: one exception type, in OpenAI's JSON shape, or Anthropic's under /v1/messages."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from backends.asgi import json_response
from backends.base import BackendError
from gateway.observability.requests import note_error

CLIENT_CLOSED = 499
"""nginx's status for a client that left; nobody reads it, it only shows in logs and metrics."""


class APIError(Exception):
    """A request that ends in `{"error": {message, type, param, code}}` with an HTTP status."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
        retryable: bool | None = None,
        retry_after: int | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code
        self.type = type
        self.retryable = retryable
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI clients parse."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def headers(self) -> dict[str, str]:
        """Retry hints for clients: x-should-retry and retry-after."""
        headers = {} if self.retryable is None else {"x-should-retry": "true" if self.retryable else "false"}
        if self.retry_after is not None:
            headers["retry-after"] = str(self.retry_after)
        return headers

    def response(self, path: str = "") -> Response:
        """The answer, in the shape of the door at `path` (Anthropic's under /v1/messages, else OpenAI's)."""
        note_error(self.code or self.type)
        body = anthropic_error(self) if path.startswith(ANTHROPIC_PATH) else self.body()
        return json_response(body, status=self.status, headers=self.headers())


ANTHROPIC_PATH = "/v1/messages"
"""Requests under this path are Anthropic clients: every refusal they get, wherever made, is in Anthropic's shape."""
_ANTHROPIC_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_error(error: APIError) -> dict[str, Any]:
    """The error body Anthropic clients parse ({"type": "error", "error": {type, message}}); the param at fault is
    named in the message."""
    kind = _ANTHROPIC_TYPES.get(error.status) or ("api_error" if error.status >= 500 else "invalid_request_error")
    message = f"{error.param}: {error.message}" if error.param and error.param not in error.message else error.message
    return {"type": "error", "error": {"type": kind, "message": message}}


def invalid(message: str, param: str | None, code: str | None = None) -> APIError:
    """A 400 invalid_request_error about `param`."""
    return APIError(message, param=param, code=code)


def wide_integer(param: str | None, what: str) -> APIError:
    """The 400 for an integer past 64 bits (`what`: where it is), which the JSON parser would turn into a float."""
    message = f"{what} is an integer past 64 bits, which this gateway cannot take exactly; send a smaller one"
    return invalid(message, param, "integer_too_large")


def rate_limited(message: str, kind: str = "requests", retry_after: int | None = None) -> APIError:
    """A 429 in OpenAI's rate-limit shape: type `requests` or `tokens` (what ran out), code `rate_limit_exceeded`
    (Anthropic's `rate_limit_error` under /v1/messages)."""
    return APIError(message, status=429, code="rate_limit_exceeded", type=kind, retry_after=retry_after)


def from_backend(error: BackendError) -> APIError:
    """Map a backend failure: a 429 (a saturated model's queue, or a backend's own) is a rate-limit error to retry
    after a second unless it said when; its other 4xx refusals stay 4xx, a deadline is a 504, everything else a 5xx
    (503 when a later try may succeed)."""
    if error.status == 429:
        return rate_limited(str(error), retry_after=error.retry_after or 1)
    if 400 <= error.status < 500:
        return APIError(
            str(error), status=error.status, code=error.code or "backend_rejected", retry_after=error.retry_after
        )
    status = error.status if error.status == 504 or not error.retryable else 503
    return APIError(
        str(error),
        status=status,
        type="server_error",
        code=error.code or "backend_error",
        retryable=error.retryable or status == 504,
        retry_after=error.retry_after,
    )
