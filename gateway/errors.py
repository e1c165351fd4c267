"""OpenAI-style errors: one exception type, one JSON shape."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from backends.base import BackendError
from gateway.json_response import json_response


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
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code
        self.type = type
        self.retryable = retryable

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI clients parse."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> Response:
        headers = {} if self.retryable is None else {"x-should-retry": "true" if self.retryable else "false"}
        return json_response(self.body(), status=self.status, headers=headers)


def invalid(message: str, param: str | None, code: str | None = None) -> APIError:
    """A 400 invalid_request_error about `param`."""
    return APIError(message, param=param, code=code)


def from_backend(error: BackendError) -> APIError:
    """Map a backend failure: its 4xx refusals stay 4xx, everything else is a retryable 5xx."""
    if 400 <= error.status < 500:
        return APIError(str(error), status=error.status, code="backend_rejected")
    status = 503 if error.retryable else error.status
    return APIError(str(error), status=status, type="server_error", code="backend_error", retryable=error.retryable)
