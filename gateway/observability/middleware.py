"""The ASGI middleware that opens a request's record, and on its end counts it and writes its access line."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backends.trace_context import current_traceparent, valid_traceparent
from gateway.observability.access_log import log_access
from gateway.observability.metrics import OTHER, GatewayMetrics
from gateway.observability.requests import RequestRecord, begin_request, end_request


class ObservabilityMiddleware:
    """Times every HTTP request, notes its status and request id; metrics and the access log at its end."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = RequestRecord(scope["method"], scope["path"])
        finished = False

        def finish() -> None:
            """Count the request and log it (once): before its last byte goes out, so a client sees it counted."""
            nonlocal finished
            if finished:
                return
            finished = True
            self.metrics.in_flight.discard(record)
            ended = time.perf_counter()
            route = getattr(scope.get("route"), "path", OTHER)
            self.metrics.record_request(record, route, ended)
            log_access(record, route, ended)

        async def send_noting(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                for name, value in message.get("headers", ()):
                    if name == b"x-request-id":
                        record.request_id = value.decode("latin-1")
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                finish()
            await send(message)

        trace = _traceparent(scope)
        record.trace_id = trace[3:35] if trace else ""
        trace_token = current_traceparent.set(trace)  # forwarded to this request's backend attempts
        token = begin_request(record)
        self.metrics.in_flight.add(record)
        try:
            await self.app(scope, receive, send_noting)
        except BaseException:
            record.status = record.status or 500
            raise
        finally:
            end_request(token)
            current_traceparent.reset(trace_token)
            finish()


def _traceparent(scope: Scope) -> str | None:
    """The request's W3C `traceparent` header, when it has one well-formed one."""
    for name, value in scope["headers"]:
        if name == b"traceparent":
            text = value.decode("latin-1").strip().lower()
            return text if valid_traceparent(text) else None
    return None
