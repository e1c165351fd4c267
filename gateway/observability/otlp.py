"""Spans out over OTLP/HTTP (protobuf): the tracer provider, a batch processor and the exporter.

Spans are queued (bounded: OTEL_BSP_MAX_QUEUE_SIZE, 2048 by default; past it the oldest are dropped, counted in
`gateway:trace_spans_dropped_total`) and sent
by the processor's own thread, so a request never waits for the collector. A failed export is logged once
per outage and counted in `gateway:trace_export_failures_total`; it never fails a request, and at exit a collector
that does not answer holds the process for SHUTDOWN_TIMEOUT_S at most.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from starlette.middleware import Middleware

from gateway.observability.spans import TracingMiddleware
from gateway.observability.tracing import SHUTDOWN_TIMEOUT_S, TracingConfig

log = logging.getLogger(__name__)

DEFAULT_SERVICE_NAME = "llm-gateway"
_EXPORTER_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry.exporter.otlp.common.http")


class Tracing:
    """The gateway's tracer, its OTLP/HTTP exporter and what the export has cost so far."""

    def __init__(self, config: TracingConfig, endpoint: str, *, export_timeout_s: float | None = None):
        """Spans go to `endpoint` (the full traces URL: tracing.traces_endpoint); each export's deadline is
        `export_timeout_s` (default: OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, else 10 s)."""
        self.endpoint = endpoint
        sampler = None if config.sample_ratio is None else ParentBased(TraceIdRatioBased(config.sample_ratio))
        self.provider = TracerProvider(resource=_resource(config.service_name), sampler=sampler)
        """With no sampler given, the SDK reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG."""
        self.exporter = CountingExporter(OTLPSpanExporter(endpoint=endpoint, timeout=export_timeout_s), endpoint)
        self.processor = CountingBatchProcessor(self.exporter)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("llm-gateway")
        log.info("spans go to %s over OTLP/HTTP", endpoint)
        for name in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
            if os.environ.get(name, "http/protobuf") != "http/protobuf":
                log.warning("%s=%s is ignored: the gateway sends OTLP/HTTP (protobuf) only", name, os.environ[name])

    def middleware(self) -> Middleware:
        """The middleware that opens each request's server span (inside the observability middleware)."""
        return Middleware(TracingMiddleware, tracer=self.tracer)

    def collector(self) -> Collector:
        return _ExportCollector(self.exporter, self.processor)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Send every span ended so far (blocks: not on the event loop)."""
        return self.provider.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        """Flush and stop the processor's thread, waiting at most SHUTDOWN_TIMEOUT_S for the collector (blocks: not
        on the event loop). The SDK would wait 30 s and more for one that does not answer, holding the exit."""
        stopping = threading.Thread(target=self.provider.shutdown, name="otlp-shutdown", daemon=True)
        stopping.start()
        stopping.join(SHUTDOWN_TIMEOUT_S)
        if stopping.is_alive():
            log.warning(
                "the spans still queued were not sent: %s did not answer in %s s", self.endpoint, SHUTDOWN_TIMEOUT_S
            )


def _resource(service_name: str | None) -> Resource:
    """OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, the configured service name over them, else llm-gateway."""
    resource = Resource.create({SERVICE_NAME: service_name} if service_name else {})
    if not service_name and not os.environ.get("OTEL_SERVICE_NAME"):
        named = str(resource.attributes.get(SERVICE_NAME, ""))
        if named.startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource


class CountingExporter(SpanExporter):
    """The OTLP exporter, counting failed exports; an outage is logged once (the exporter's own retry and
    error lines are let through for its first failed batch only), and its end once."""

    def __init__(self, exporter: SpanExporter, endpoint: str):
        self._exporter = exporter
        self._endpoint = endpoint
        self.failed_batches = 0
        self.failed_spans = 0
        self._quiet = _Quiet()
        for name in _EXPORTER_LOGGERS:
            logging.getLogger(name).addFilter(self._quiet)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._exporter.export(spans)
        if result is SpanExportResult.SUCCESS:
            if self._quiet.active:
                self._quiet.active = False
                log.warning("span export to %s works again", self._endpoint)
            return result
        self.failed_batches += 1
        self.failed_spans += len(spans)
        if not self._quiet.active:
            self._quiet.active = True
            log.warning(
                "could not export %d spans to %s; until it works again, failures are only counted "
                "(gateway:trace_export_failures_total)",
                len(spans),
                self._endpoint,
            )
        return result

    def shutdown(self) -> None:
        self._exporter.shutdown()
        for name in _EXPORTER_LOGGERS:
            logging.getLogger(name).removeFilter(self._quiet)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)


class CountingBatchProcessor(BatchSpanProcessor):
    """The SDK's batch processor (its queue bounded: OTEL_BSP_MAX_QUEUE_SIZE), counting the spans it drops when the
    queue is full (a collector away or slower than the requests): the SDK says so in one log line, never how many."""

    def __init__(self, exporter: SpanExporter) -> None:
        super().__init__(exporter)
        self.dropped = 0

    def on_end(self, span: ReadableSpan) -> None:
        queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)  # the SDK's deque (1.45)
        if queue is not None and len(queue) == queue.maxlen and span.context and span.context.trace_flags.sampled:
            self.dropped += 1
        super().on_end(span)


class _Quiet(logging.Filter):
    """Drops the exporter's log lines while an outage has already been reported."""

    active = False

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.active


class _ExportCollector(Collector):
    """gateway:trace_export_failures_total{unit=batches|spans} and gateway:trace_spans_dropped_total, read at scrape
    time."""

    def __init__(self, exporter: CountingExporter, processor: CountingBatchProcessor):
        self._exporter = exporter
        self._processor = processor

    def collect(self) -> Iterator[CounterMetricFamily]:
        failures = CounterMetricFamily(
            "gateway:trace_export_failures", "Span batches and spans the OTLP exporter could not send", labels=["unit"]
        )
        failures.add_metric(["batches"], self._exporter.failed_batches)
        failures.add_metric(["spans"], self._exporter.failed_spans)
        yield failures
        yield CounterMetricFamily(
            "gateway:trace_spans_dropped",
            "Spans dropped because the export queue was full (the collector away or too slow)",
            value=self._processor.dropped,
        )
