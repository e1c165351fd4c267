"""The ASGI entry of every HTTP request: one pure-ASGI layer, then routing by exact path.

Starlette's own stack wraps a request in seven layers (server errors, the observability and request-id
middlewares, exception handlers twice, the router, the route), each with its own wrapper around `send`.
Here `Front` does what the outer ones did, in one layer with one `send` wrapper: the request's metrics record and
access line, its `x-request-id`, the client's `traceparent`, and a 500 in OpenAI's shape for a crash. `Dispatch`
calls the endpoint of a route matched by exact path and method directly and answers an `APIError` or
`HTTPException` itself; every other request (path parameters, 404, 405, lifespan) takes Starlette's router.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, get_route_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backends.trace_context import current_traceparent, valid_traceparent
from gateway.api.turns import Turns
from gateway.errors import APIError
from gateway.ids import random_hex
from gateway.observability.access_log import log_access
from gateway.observability.metrics import OTHER, GatewayMetrics
from gateway.observability.requests import RequestRecord, begin_request, end_request

log = logging.getLogger(__name__)

_CLIENT_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,128}")
Endpoint = Callable[[Request], Awaitable[Response]]
_SENDS = "gateway.sends"
"""Scope key: `Front`'s `send` wrapper and the server's own `send` it wraps."""
_ANTHROPIC = "/v1/messages"
"""Anthropic's door's paths start so (count_tokens too): answers there name their id as Anthropic's do."""


class GatewayApp(Starlette):
    """A Starlette application (routes, lifespan, state) whose requests go through `Front`, the operator's
    optional `layers` (outermost first), then `Dispatch`."""

    def __init__(self, *, routes: Sequence[Route], layers: Sequence[Middleware], metrics: GatewayMetrics, **kwargs):
        super().__init__(routes=routes, **kwargs)
        self.router.redirect_slashes = False  # `Front` serves a path with a trailing slash as the path without it
        self._layers = list(layers)
        self._metrics = metrics

    def build_middleware_stack(self) -> ASGIApp:
        handlers = {APIError: _api_error, HTTPException: _http_error}
        app: ASGIApp = Dispatch(self.routes, ExceptionMiddleware(self.router, handlers=handlers))
        for cls, args, kwargs in reversed(self._layers):
            app = cls(app, *args, **kwargs)
        return Front(app, self.router, self._metrics)


class Front:
    """Per HTTP request: one trailing slash dropped from the path, the metrics record (counted, and its access line
    written, before the last byte goes out), `x-request-id` (the client's own when it sent a sane one; `request-id` too
    under /v1/messages, as Anthropic's), the client's
    well-formed `traceparent` forwarded to the backends, and a crash before the answer started turned into a 500
    body. Requests that arrive together start a few per loop iteration (`api/turns.py`). Other scopes go to
    `other`."""

    def __init__(self, app: ASGIApp, other: ASGIApp, metrics: GatewayMetrics):
        self.app = app
        self.other = other
        self.metrics = metrics
        self.turns = Turns()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.other(scope, receive, send)
            return
        path = scope["path"]
        if len(path) > 1 and path[-1] == "/":  # served as without the slash: Starlette's 307 loses a POST for some
            scope["path"] = path[:-1]  # clients (curl without -L, those that follow with a GET)
        record = RequestRecord(scope["method"], scope["path"])
        supplied, trace = _request_headers(scope["headers"])
        request_id = supplied if supplied and _CLIENT_REQUEST_ID.fullmatch(supplied) else random_hex()
        record.request_id = request_id
        record.trace_id = trace[3:35] if trace else ""
        scope.setdefault("state", {})["request_id"] = request_id
        id_header = (b"x-request-id", request_id.encode())
        # Anthropic's SDKs read a response's id from `request-id` (into `_request_id`, and on every error they raise)
        id_headers = [id_header, (b"request-id", id_header[1])] if scope["path"].startswith(_ANTHROPIC) else [id_header]
        metrics = self.metrics
        started = finished = False

        def finish() -> None:
            """Count the request and log it (once): before its last byte goes out, so a client sees it counted."""
            nonlocal finished
            if finished:
                return
            finished = True
            metrics.in_flight.discard(record)
            ended = time.perf_counter()
            route = getattr(scope.get("route"), "path", OTHER)
            metrics.record_request(record, route, ended)
            log_access(record, route, ended)

        async def send_noting(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                record.status = message["status"]
                message["headers"] = [*message.get("headers", ()), *id_headers]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                finish()
            await send(message)

        scope[_SENDS] = (send_noting, send)
        # forwarded to this request's backend attempts (none to set when the client sent none and none is set)
        trace_token = current_traceparent.set(trace) if trace or current_traceparent.get() else None
        token = begin_request(record)
        metrics.in_flight.add(record)
        try:
            turn = self.turns.take()
            if turn is not None:  # this loop iteration's turns are taken: start in a later one
                await turn
            await self.app(scope, receive, send_noting)
        except Exception:
            if started:
                record.status = record.status or 500
                raise
            log.exception("request %s failed", request_id)
            await APIError("internal server error", status=500, type="server_error").response(scope["path"])(
                scope, receive, send_noting
            )
        except BaseException:
            record.status = record.status or 500
            raise
        finally:
            end_request(token)
            if trace_token is not None:
                current_traceparent.reset(trace_token)
            finish()
            # `finish` holds the scope, which would hold it back through `send_noting`: a reference cycle that
            # left the request's scope, record and uvicorn's cycle and transport to the garbage collector
            scope.pop(_SENDS, None)


def more_body_send(scope: Scope, send: Send) -> Send:
    """The `send` for a body's messages before its last: the server's own when `send` is `Front`'s wrapper (which
    sees only the head and the last message: no wrapper per streamed chunk), else `send` (an operator's layer
    between them may want to see every message)."""
    sends = scope.get(_SENDS)
    return sends[1] if sends is not None and sends[0] is send else send


def _request_headers(headers: Sequence[tuple[bytes, bytes]]) -> tuple[str, str | None]:
    """The request's `x-request-id` (as sent, "" when absent) and its `traceparent` when well-formed, in one pass."""
    supplied, trace = "", None
    for name, value in headers:
        if name == b"x-request-id":
            supplied = value.decode("latin-1")
        elif name == b"traceparent" and trace is None:
            text = value.decode("latin-1").strip().lower()
            trace = text if valid_traceparent(text) else ""
    return supplied, trace or None


class Dispatch:
    """Routes without path parameters, matched by exact path and method and called directly; the rest go to
    `fallback` (Starlette's router behind its exception handlers)."""

    def __init__(self, routes: Sequence[object], fallback: ASGIApp):
        self._exact = {r.path: r for r in routes if isinstance(r, Route) and not r.param_convertors}
        self._fallback = fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self._exact.get(get_route_path(scope))
        if route is None or scope["method"] not in route.methods:
            await self._fallback(scope, receive, send)
            return
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        scope["path_params"] = {}
        try:
            response = await route.endpoint(Request(scope, receive, send))
        except APIError as e:
            response = e.response(scope["path"])
        except HTTPException as e:
            response = _http_error_response(scope, e)
        await response(scope, receive, send)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return exc.response(request.scope["path"])


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _http_error_response(request.scope, exc)


def _http_error_response(scope: Scope, exc: HTTPException) -> Response:
    """The router's refusal in the door's shape, with its headers (a 405's `Allow`: RFC 9110 requires it)."""
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    message = f"{exc.detail}: {scope['method']} {scope['path']}"
    response = APIError(message, status=exc.status_code, code=code).response(scope["path"])
    if exc.headers:
        response.headers.update(exc.headers)
    return response
