"""The spans of one traced HTTP request: a server span (route, status, request id, GenAI attributes) and the
child spans of its stages, one backend span per choice (the traceparent sent to the backend names it), and
the parse span (the time the door spent turning backend steps into events).

The HTTP and GenAI attribute names are OpenTelemetry's semantic conventions; `gen_ai.latency.*` are vLLM's.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, aclosing
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backends.base import Backend, BackendError, GenerateChunk, GenerateRequest
from backends.trace_context import current_traceparent
from gateway.observability.requests import RequestRecord, current_request
from gateway.observability.tracing import current_spans

_PROPAGATOR = TraceContextTextMapPropagator()
_attempt: ContextVar[Span | None] = ContextVar("gateway_backend_span", default=None)
"""The backend span while its request is being sent (the router's dispatch notes the replica on it)."""


class TracingMiddleware:
    """Opens the server span of every HTTP request (child of the client's traceparent) and ends it with the
    status, route and request id. Sits inside the observability middleware, whose record and traceparent it reads."""

    def __init__(self, app: ASGIApp, tracer: Tracer):
        self.app = app
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = current_traceparent.get()
        parent = _PROPAGATOR.extract({"traceparent": incoming}) if incoming else otel_context.Context()
        method = scope["method"]
        span = self.tracer.start_span(
            method,
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": scope["path"], "url.scheme": scope["scheme"]},
        )
        if not span.is_recording():  # sampled out: no spans, only the trace context (sampled flag off) goes on
            forwarded = current_traceparent.set(_traceparent(span))
            try:
                await self.app(scope, receive, send)
            finally:
                current_traceparent.reset(forwarded)
            return
        spans = RequestSpans(self.tracer, span, trace.set_span_in_context(span, parent), current_request())
        status = 0

        async def send_noting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                spans.finish(scope, status)
            await send(message)

        token = current_spans.set(spans)
        attached = otel_context.attach(spans.context)
        try:
            await self.app(scope, receive, send_noting)
        except BaseException:
            status = status or 500
            raise
        finally:
            otel_context.detach(attached)
            current_spans.reset(token)
            spans.finish(scope, status)


class RequestSpans:
    """One request's server span and what its stages add to it (see observability/tracing.py for the hooks)."""

    def __init__(self, tracer: Tracer, span: Span, context: otel_context.Context, record: RequestRecord | None):
        self.tracer = tracer
        self.span = span
        self.context = context
        self._record = record
        self._operation = "generate"
        self._model = ""
        self._parse_first = self._parse_last = self._parse_ns = self._parse_steps = 0
        self._finished = False

    def stage(self, name: str) -> AbstractContextManager[Span]:
        return self.tracer.start_as_current_span(name, record_exception=False)

    def note_request(self, operation: str, response_id: str, model: str, max_tokens: int, settings: Any) -> None:
        self._operation, self._model = operation, model
        self.span.set_attributes(
            {
                "gen_ai.operation.name": operation,
                "gen_ai.request.model": model,
                "gen_ai.response.id": response_id,
                "gen_ai.request.max_tokens": max_tokens,
                "gen_ai.request.temperature": settings.temperature,
                "gen_ai.request.top_p": settings.top_p,
                "gen_ai.request.choice.count": settings.n,
                "gen_ai.request.stream": settings.stream,
            }
        )
        if settings.seed is not None:
            self.span.set_attribute("gen_ai.request.seed", settings.seed)

    async def backend_stream(self, backend: Backend, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        """The backend's chunks inside a CLIENT span: the traceparent sent with the request carries its id,
        so the backend's own spans are its children; time to first token, output tokens, finish reason."""
        span = self.tracer.start_span(
            f"{self._operation} {self._model}",
            context=self.context,
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": self._operation,
                "gen_ai.request.model": self._model,
                "gen_ai.provider.name": _provider(backend),
                "gateway.backend.rid": request.rid,
            },
        )
        started = time.monotonic()
        tokens, finish = 0, None
        try:
            async with aclosing(backend.generate(request)) as chunks:
                chunk = await _sent_in(span, chunks)
                if chunk is not None:
                    span.set_attribute("gen_ai.latency.time_to_first_token", time.monotonic() - started)
                    span.add_event("first_token")
                while chunk is not None:
                    tokens += len(chunk.output_ids)
                    finish = chunk.finish_reason or finish
                    yield chunk
                    chunk = await anext(chunks, None)
        except Exception as e:
            span.set_status(Status(StatusCode.ERROR, str(e)))
            span.set_attribute("error.type", type(e).__name__)
            raise
        finally:
            span.set_attribute("gen_ai.usage.output_tokens", tokens)
            if finish is not None:
                span.set_attribute("gen_ai.response.finish_reasons", [finish])
            span.end()

    def note_replica(self, url: str) -> None:
        span = _attempt.get()
        if span is None:
            return
        parts = urlsplit(url)
        span.set_attributes({"server.address": parts.hostname or url, "server.port": parts.port or 80})
        span.add_event("dispatch", {"url.full": url})

    def note_replica_failed(self, url: str, error: BackendError) -> None:
        span = _attempt.get()
        if span is not None:
            span.add_event("failover", {"url.full": url, "error.type": error.code or str(error.status)})

    def timed_door(self, door: Any) -> Any:
        return _TimedDoor(door, self)

    def parsed(self, started_ns: int, ended_ns: int) -> None:
        """A door step ran from `started_ns` to `ended_ns` (time.time_ns())."""
        self._parse_first = self._parse_first or started_ns
        self._parse_last = ended_ns
        self._parse_ns += ended_ns - started_ns
        self._parse_steps += 1

    def finish(self, scope: Scope, status: int) -> None:
        """End the server span (once): route, status, request id, and what the request's record learned."""
        if self._finished:
            return
        self._finished = True
        span = self.span
        route = getattr(scope.get("route"), "path", None)
        if route:
            span.update_name(f"{scope['method']} {route}")
            span.set_attribute("http.route", route)
        span.set_attribute("http.response.status_code", status)
        request_id = scope.get("state", {}).get("request_id")
        if request_id:
            span.set_attribute("gateway.request_id", request_id)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))
            span.set_attribute("error.type", str(status))
        record = self._record
        if record is not None:
            _record_attributes(span, record)
        if self._parse_steps:
            self.tracer.start_span(
                "gateway.parse",
                context=self.context,
                start_time=self._parse_first,
                attributes={"gateway.parse.steps": self._parse_steps, "gateway.parse.busy_s": self._parse_ns / 1e9},
            ).end(end_time=self._parse_last)
        span.end()


async def _sent_in(span: Span, chunks: AsyncIterator[GenerateChunk]) -> GenerateChunk | None:
    """The first chunk, with `span` current while the request is sent (and retried) and its id in the
    traceparent the backend receives. Set and reset with no `yield` between: the context stays this task's."""
    forwarded = current_traceparent.set(_traceparent(span))
    attempt = _attempt.set(span)
    try:
        return await anext(chunks, None)
    finally:
        _attempt.reset(attempt)
        current_traceparent.reset(forwarded)


def _traceparent(span: Span) -> str:
    """The W3C traceparent that makes `span` the parent."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def _record_attributes(span: Span, record: RequestRecord) -> None:
    """The GenAI response attributes (and the tenant) from the request's metrics record."""
    if record.tenant:
        span.set_attribute("gateway.tenant", record.tenant)
    if not record.generating:
        return
    span.set_attributes(
        {
            "gen_ai.usage.input_tokens": record.prompt_tokens,
            "gen_ai.usage.output_tokens": record.completion_tokens,
            "gen_ai.response.finish_reasons": record.finish_reasons,
        }
    )
    if record.cached_tokens:
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", record.cached_tokens)
    if record.replica:
        span.set_attribute("gateway.replica", record.replica)


def _provider(backend: Backend) -> str:
    """The backend's protocol, named after its client module: sglang (also the bundled worker) or vllm."""
    replicas = getattr(backend, "replicas", None)
    if replicas:
        backend = replicas[0].backend
    return type(backend).__module__.rpartition(".")[2]


class _TimedDoor:
    """A door whose steps (the family's parser and the event rendering) are timed for the parse span."""

    def __init__(self, door: Any, spans: RequestSpans):
        self._door = door
        self._spans = spans

    def __getattr__(self, name: str) -> Any:
        return getattr(self._door, name)

    def step(self, index: int, step: Any) -> list[Any]:
        started = time.time_ns()
        events = self._door.step(index, step)
        self._spans.parsed(started, time.time_ns())
        return events
