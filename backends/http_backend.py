"""What the HTTP backend clients share: one keep-alive pool for streamed POSTs (errors mapped), health and small calls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson

from backends.base import Backend, BackendError, GenerateChunk, MalformedStream, joined
from backends.http_stream import PostedLines, StreamPool

SSE_DATA = b"data:"
SSE_DONE = "[DONE]"
"""What stream_event gives for the stream's `data: [DONE]` line."""
_DONE = SSE_DONE.encode()


class HTTPBackend(Backend):
    """A backend server at `base_url`: streamed generations, health checks and other small calls on one lean
    keep-alive pool (backends/http_stream.py), which closes the connections the server closed while idle."""

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout: float = 5.0,
        health_timeout: float = 5.0,
        head_timeout: float | None = 30.0,
    ):
        self.base_url = base_url.rstrip("/")
        self._health_timeout = health_timeout
        self._streams = StreamPool(
            self.base_url, connect_timeout=connect_timeout, head_timeout_s=head_timeout, refused=http_error
        )

    def _stream_lines(self, path: str, body: bytes) -> PostedLines:
        """POST `body` and give the response's lines, a socket read's batch at a time; entered only once the
        server accepted (200); its `read_rest_later()` leaves what follows the finish to the connection.

        A refusal is a BackendError with the server's status (`http_error`); a connection that fails before or
        during the stream, or a server that sends no answer's head within `head_timeout`, is a retryable 503.
        """
        return self._streams.post_lines(path, body)

    async def call(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """A small request (health, abort, model list) within the health timeout: its status and body.

        Unreachable, broken or later than the timeout is a retryable 503 BackendError.
        """
        try:
            async with asyncio.timeout(self._health_timeout):
                return await self._streams.call(method, path, body)
        except TimeoutError:
            raise BackendError(
                f"backend {self.base_url} did not answer {path} within {self._health_timeout} s",
                status=503,
                retryable=True,
            ) from None

    async def ready(self) -> bool:
        try:
            status, _ = await self.call("GET", "/health")
        except BackendError:
            return False
        return status == 200

    async def close(self) -> None:
        await self._streams.close()


def http_error(status: int, body: bytes) -> BackendError:
    """A non-200 answer as a BackendError carrying the server's status and message."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    message = body.decode("utf-8", "replace")[:500]
    if isinstance(parsed, dict):
        error = parsed.get("error", parsed)
        message = str(error.get("message", message)) if isinstance(error, dict) else str(error)
    return refused(status, message)


def refused(status: int, message: Any, what: str = "backend refused the request") -> BackendError:
    """The server's refusal with an HTTP status (400 to 599): a 4xx is the request's own (passed on, never tried
    elsewhere), a 429 or a 5xx the replica's (retryable: another replica, or a later try, may take it)."""
    return BackendError(f"{what} ({status}): {message}", status=status, retryable=status >= 500 or status == 429)


def event_error(error: Any) -> BackendError:
    """A mid-stream `{"error": ...}` event: its `code` is the HTTP status the server gave the failure (SGLang's
    http_server: 400, or the ValueError's own status_code; vLLM's ErrorResponse: 400 validation, 500 engine or
    generation error, 503 retryable), read as a refusal with that status; without one a 502."""
    message = error.get("message", error) if isinstance(error, dict) else error
    code = error.get("code") if isinstance(error, dict) else None
    if type(code) is int and 400 <= code < 600:
        return refused(code, message)
    return BackendError(f"backend failed: {message}")


def batch_chunk(
    lines: list[bytes], parse: Callable[[bytes], list[GenerateChunk]], ended: Callable[[], bool]
) -> tuple[GenerateChunk | None, BackendError | None]:
    """One socket read's lines as one chunk (None: they held no output), parsed up to the stream's end (`ended()`
    after a line). An event that fails ends the batch: its error comes beside the output before it, which the
    caller passes on first."""
    if len(lines) == 2 and not lines[1] and lines[0]:  # one event and its blank line (most reads): no loop
        try:
            new = parse(lines[0])
        except BackendError as e:
            return None, e
        return (new[0] if len(new) == 1 else joined(new) if new else None), None
    new = []
    failure = None
    try:
        for line in lines:
            if line:  # the blank line that ends an SSE event: nothing to parse
                new += parse(line)
                if ended():
                    break
    except BackendError as e:
        failure = e
    return (joined(new) if new else None), failure


def stream_event(line: bytes, on_error: Callable[[Any], BackendError] = event_error) -> dict[str, Any] | str | None:
    """One SSE line of a backend stream: None for a line with no data, SSE_DONE, or the event object.

    Invalid JSON and a non-object are MalformedStream; an `error` event is `on_error`'s BackendError.
    """
    if line[:5] != SSE_DATA:
        return None
    data = line[5:].strip()
    if data == _DONE:
        return SSE_DONE
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise MalformedStream(f"backend sent invalid JSON in its stream: {e}") from None
    if not isinstance(event, dict):
        raise MalformedStream("backend sent a stream event that is not an object")
    if "error" in event:
        raise on_error(event["error"])
    return event


SHAPE_ERRORS = (TypeError, ValueError, AttributeError, KeyError, IndexError)
"""What reading a field of the wrong type raises (`except SHAPE_ERRORS as e: raise shape_error(e)`: a plain
try costs nothing per event, unlike a context manager)."""


def shape_error(error: Exception) -> MalformedStream:
    """A stream event of the wrong shape: a MalformedStream, not a crash."""
    return MalformedStream(f"backend sent a stream event of the wrong shape: {error!r}")


def token_ids(value: Any, field: str) -> list[int]:
    """`value` as a list of token ids; anything else is a MalformedStream."""
    if type(value) is not list:
        raise MalformedStream(f"backend sent {field} that is not a list of token ids")
    for i in value:
        if type(i) is not int:
            raise MalformedStream(f"backend sent {field} that is not a list of token ids")
    return value
