"""The hooks a request's stages call to be traced; each is a context-variable read and nothing more when tracing is off.

The tracing middleware (observability/spans.py, installed only when an OTLP endpoint is configured) puts the
request's `RequestSpans` in a context variable; the hooks below hand their work to it, or do nothing without it.
Nothing here imports OpenTelemetry, so a gateway that traces nothing never loads it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from backends.base import Backend, BackendError, GenerateChunk, GenerateRequest

current_spans: ContextVar[Any] = ContextVar("gateway_spans", default=None)
"""The request's `spans.RequestSpans` while a traced request is served, else None."""

_UNTRACED: AbstractContextManager[None] = nullcontext()
D = TypeVar("D")


@dataclass
class TracingConfig:
    """Where spans go: an OTLP/HTTP collector (None: the standard OTEL_EXPORTER_OTLP_* variables decide)."""

    endpoint: str | None = None
    """A collector's base URL (`/v1/traces` is added) or its full traces URL."""
    service_name: str | None = None
    """The `service.name` resource attribute (default: OTEL_SERVICE_NAME, else llm-gateway)."""
    sample_ratio: float | None = None
    """Trace this fraction of new traces, following the caller's decision (default: OTEL_TRACES_SAMPLER)."""


TRACES_PATH = "/v1/traces"
SHUTDOWN_TIMEOUT_S = 3.0
"""At exit, how long the spans still queued may take to go out (observability/otlp.py; the chart's grace period and
a process group's wait for its children count it)."""


def traces_endpoint(config: TracingConfig, env: Mapping[str, str] = os.environ) -> str | None:
    """The URL spans are posted to, or None: tracing off. The configured endpoint (`/v1/traces` added unless it
    ends so), else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces;
    OTEL_SDK_DISABLED=true turns it all off, and OTEL_TRACES_EXPORTER=none the variables."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if config.endpoint:
        endpoint = config.endpoint.rstrip("/")
        return endpoint if endpoint.endswith(TRACES_PATH) else endpoint + TRACES_PATH
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return base.rstrip("/") + TRACES_PATH if base else None


def stage(name: str) -> AbstractContextManager[Any]:
    """A child span of the request's span around a stage (render, grammar, admission, queue)."""
    spans = current_spans.get()
    return _UNTRACED if spans is None else spans.stage(name)


def note_request(operation: str, response_id: str, model: str, max_tokens: int, settings: Any) -> None:
    """The GenAI request attributes of a generation (`settings`: its GenerationSettings)."""
    spans = current_spans.get()
    if spans is not None:
        spans.note_request(operation, response_id, model, max_tokens, settings)


def backend_stream(backend: Backend, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
    """`backend.generate(request)`, inside a backend span whose id the forwarded traceparent carries."""
    spans = current_spans.get()
    return backend.generate(request) if spans is None else spans.backend_stream(backend, request)


def note_replica(url: str) -> None:
    """The backend attempt being sent goes to the replica at `url`."""
    spans = current_spans.get()
    if spans is not None:
        spans.note_replica(url)


def note_replica_failed(url: str, error: BackendError) -> None:
    """The attempt on the replica at `url` failed with `error` before any output; another replica is tried."""
    spans = current_spans.get()
    if spans is not None:
        spans.note_replica_failed(url, error)


def traced_door(door: D) -> D:
    """`door` itself, or (traced) a door that times its steps: the parse span."""
    spans = current_spans.get()
    return door if spans is None else spans.timed_door(door)
