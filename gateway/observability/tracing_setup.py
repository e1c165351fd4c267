"""Tracing's start: OpenTelemetry is imported only when an endpoint is configured (CLI, config or OTEL_* variables)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from gateway.observability.tracing import TracingConfig, traces_endpoint

if TYPE_CHECKING:
    from gateway.observability.otlp import Tracing


class TracingUnavailable(RuntimeError):
    """Tracing was asked for but the OpenTelemetry packages are not installed."""


def start_tracing(config: TracingConfig) -> Tracing | None:
    """The gateway's tracing when an endpoint is configured (CLI, config or OTEL_* variables); None otherwise,
    and then OpenTelemetry is not even imported."""
    endpoint = traces_endpoint(config)
    if endpoint is None:
        return None
    try:
        otlp = importlib.import_module("gateway.observability.otlp")
    except ImportError as e:
        raise TracingUnavailable(
            f"traces to {endpoint} need the OpenTelemetry SDK and OTLP/HTTP exporter ({e}): "
            "pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http"
        ) from None
    return otlp.Tracing(config, endpoint)
