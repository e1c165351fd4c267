"""Server-wide limits an operator sets (CLI or config): request body size, requests served at once, header
timeout, and the CPU time a request's grammar may cost to compile."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from backends.client_timeouts import (
    DEFAULT_BODY_MIN_RATE,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_WAITING_HEADS,
    DEFAULT_SEND_TIMEOUT_S,
)
from backends.compile_pool import DEFAULT_GRAMMAR_COMPILE_S
from gateway.api.bodies import DEFAULT_MAX_BODY_BYTES
from gateway.errors import APIError

UNLIMITED_PATHS = frozenset({"/health", "/ready", "/metrics"})
"""Probes and scrapes are answered whatever the load."""


@dataclass
class ServerLimits:
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_concurrency: int | None = None
    """HTTP requests served at once (streams included); past it a 503 with retry-after. None: no limit."""
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    """A request's headers must arrive within this many seconds of the connection opening (or the last response)."""
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S
    """A client that takes no bytes of its answer for this many seconds (its socket's buffer full) is cut off."""
    body_min_rate: float = DEFAULT_BODY_MIN_RATE
    """Bytes a second a request body must average once `header_timeout_s` has passed since its headers (a body
    trickled slower is cut off, however often it sends a byte)."""
    max_waiting_heads: int = DEFAULT_MAX_WAITING_HEADS
    """Connections waiting for a request's head at once, per process; past it the one waiting longest is closed."""
    workers: int = 1
    """Gateway processes sharing the port (gateway/process/group.py)."""
    grammar_compile_s: float | None = DEFAULT_GRAMMAR_COMPILE_S
    """CPU seconds one request's grammar may cost (past it a 400 naming the schema). None: built in the gateway's
    own process, unbounded."""


class ConcurrencyLimit:
    """Answers 503 (the door's error shape, `retry-after: 1`) to a request arriving while `limit` are being served."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit
        self.active = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNLIMITED_PATHS:
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            error = APIError(
                f"the gateway is serving its limit of {self.limit} requests; try again shortly",
                status=503,
                type="server_error",
                code="too_many_requests_in_flight",
                retry_after=1,
            )
            await error.response(scope["path"])(scope, receive, send)
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1
