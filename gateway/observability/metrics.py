"""The gateway's Prometheus metrics, named as vLLM names its own (`vllm:X` → `gateway:X`, label `model_name`),
so dashboards and autoscalers written for vLLM read them with the prefix changed. Documented in docs/operations.md.

Per-request work is a handful of counter and histogram updates when the request ends (`record_request`);
per-replica gauges are read from the routers only when /metrics is scraped.
"""

from __future__ import annotations

import asyncio
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from math import isnan
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.values import MutexValue

from backends.base import BackendError
from backends.circuit_breaker import BreakerState
from backends.observer import RouterObserver
from backends.router import Router
from backends.vllm_buckets import E2E_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS
from gateway.models.registry import ModelRegistry
from gateway.observability.requests import RequestRecord, note_dispatch, note_failover
from gateway.observability.tracing import note_replica, note_replica_failed

# fmt: off
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
GRAMMAR_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0)
# fmt: on
BREAKER_VALUES = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}
OTHER = "other"
NONE = "none"
"""The label of a request that names no (served) model or tenant."""


class TenantLabels:
    """Caps the tenant label's values: the first `limit` tenants seen keep their name, later ones are `other`."""

    def __init__(self, limit: int = 50):
        self._limit = limit
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def label(self, tenant: str) -> str:
        if not tenant:
            return NONE
        if tenant in self._known:
            return tenant
        with self._lock:
            if len(self._known) < self._limit:
                self._known.add(tenant)
                return tenant
        return OTHER


class GatewayMetrics:
    """One gateway's metrics in a registry of its own (`render()` is the /metrics body)."""

    def __init__(self, registry: ModelRegistry | None = None, *, tenant_limit: int = 50):
        self.registry = CollectorRegistry()
        self.tenants = TenantLabels(tenant_limit)
        self._series: dict[str, _ModelSeries] = {}
        self._request_counts: dict[tuple[str, str, int, str], _Tally] = {}
        """The children of `requests` by label values, looked up once (`labels()` costs a lock and a dict)."""
        self.in_flight: set[RequestRecord] = set()
        """Requests being served now (the middleware adds and removes them)."""
        r = self.registry
        model = ["model_name"]
        self.requests = Counter(
            "gateway:requests",
            "HTTP requests by route, status, model and tenant",
            ["model_name", "route", "status", "tenant"],
            registry=r,
        )
        self.request_success = Counter(
            "gateway:request_success",
            "Finished choices by finish reason",
            ["model_name", "finished_reason"],
            registry=r,
        )
        self.ttft = Histogram(
            "gateway:time_to_first_token_seconds",
            "Request arrival to first output",
            model,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.tpot = Histogram(
            "gateway:time_per_output_token_seconds",
            "Mean time per output token after the first",
            model,
            buckets=TPOT_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "gateway:e2e_request_latency_seconds",
            "Request arrival to last byte of a generation",
            model,
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            "gateway:overhead_seconds",
            "Request arrival to its first backend attempt sent",
            model,
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter("gateway:prompt_tokens", "Prompt tokens of generations", model, registry=r)
        self.generation_tokens = Counter("gateway:generation_tokens", "Output tokens", model, registry=r)
        self.cached_tokens = Counter(
            "gateway:cached_prompt_tokens", "Prompt tokens the backend had cached", model, registry=r
        )
        self.waiting = Gauge(
            "gateway:num_requests_waiting", "Requests queued in the gateway before admission", model, registry=r
        )
        self.queue_wait = Histogram(
            "gateway:request_queue_time_seconds",
            "Time a request waited for admission",
            model,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.grammar_build = Histogram(
            "gateway:grammar_build_seconds", "Building a request's grammar", model, buckets=GRAMMAR_BUCKETS, registry=r
        )
        self.grammar_compile = Histogram(
            "gateway:grammar_compile_seconds",
            "CPU time compiling a request's grammar under the compile budget",
            model,
            buckets=GRAMMAR_BUCKETS,
            registry=r,
        )
        self.grammar_cache = Counter(
            "gateway:grammar_cache_lookups",
            "The compile budget's cache: hit, miss or over_budget",
            ["model_name", "result"],
            registry=r,
        )
        self.shielded = Counter(
            "gateway:shielded_spellings", "Added-token spellings typed by clients, shielded", model, registry=r
        )
        self.retries = Counter(
            "gateway:backend_retries",
            "Requests moved off a replica (it failed before any output) to another",
            ["model_name", "replica"],
            registry=r,
        )
        self.backend_errors = Counter(
            "gateway:backend_errors",
            "Failed backend attempts by status",
            ["model_name", "replica", "status"],
            registry=r,
        )
        self.ignored_fields = Counter(
            "gateway:requests_with_ignored_fields",
            "Requests whose body held top-level fields the door does not declare (ignored, as vLLM and SGLang do)",
            ["route"],
            registry=r,
        )
        self.policy_reloads = Counter(
            "gateway:policy_reloads", "Tenant policy reloads by outcome", ["outcome"], registry=r
        )
        r.register(RunningCollector(self.in_flight, [m.id for m in registry or ()]))
        r.register(LoopTasksCollector())
        if registry is not None:
            r.register(ReplicaCollector(registry))
            for served in registry:
                if isinstance(served.backend, Router):
                    served.backend.observer = RouterMetrics(self, served.id)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def record_request(self, record: RequestRecord, route: str, ended: float) -> None:
        """Count a finished request (any route); generations also feed the latency and token metrics."""
        model = record.model or NONE
        key = (model, route, record.status, self.tenants.label(record.tenant))
        counter = self._request_counts.get(key)
        if counter is None:
            counter = self._request_counts[key] = _Tally(self.requests.labels(model, route, str(record.status), key[3]))
        counter.inc(1)
        if record.ignored_fields:
            self.ignored_fields.labels(route).inc()
        if record.grammar_cache:  # counted for refused requests too (over budget)
            self.grammar_cache.labels(model, record.grammar_cache).inc()
        if not record.generating:
            return
        series = self._series.get(model) or self._series.setdefault(model, _ModelSeries(self, model))
        for reason in record.finish_reasons:
            series.finished(reason).inc(1)
        series.e2e.observe(ended - record.started)
        if record.first_token is not None:
            series.ttft.observe(record.first_token - record.started)
            if record.completion_tokens > 1 and record.last_token is not None:
                series.tpot.observe((record.last_token - record.first_token) / (record.completion_tokens - 1))
        if record.dispatched is not None:
            series.overhead.observe(record.dispatched - record.started)
        if record.prompt_tokens:
            series.prompt_tokens.inc(record.prompt_tokens)
        if record.completion_tokens:
            series.generation_tokens.inc(record.completion_tokens)
        if record.cached_tokens:
            series.cached_tokens.inc(record.cached_tokens)
        if record.shielded:
            series.shielded.inc(record.shielded)
        if record.grammar_seconds is not None:
            series.grammar_build.observe(record.grammar_seconds)
        if record.grammar_compile_seconds is not None:
            series.grammar_compile.observe(record.grammar_compile_seconds)

    @contextmanager
    def queued(self, model: str) -> Iterator[None]:
        """Around a request's wait for admission (tenant limits, concurrency): the waiting gauge and queue time."""
        gauge = self.waiting.labels(model)
        gauge.inc()
        start = time.perf_counter()
        try:
            yield
        finally:
            gauge.dec()
            self.queue_wait.labels(model).observe(time.perf_counter() - start)

    def record_policy_reload(self, ok: bool) -> None:
        """A tenant policy reload happened (`ok`: applied; else refused and the old policy kept)."""
        self.policy_reloads.labels("success" if ok else "failure").inc()


class _ModelSeries:
    """One model's children of the per-model metrics, looked up once (`labels()` costs a lock and a dict); those
    every generation updates as `_Tally`s."""

    def __init__(self, metrics: GatewayMetrics, model: str):
        for name in ("e2e", "ttft", "tpot", "overhead", "prompt_tokens", "generation_tokens", "cached_tokens"):
            setattr(self, name, _Tally(getattr(metrics, name).labels(model)))
        for name in ("shielded", "grammar_build", "grammar_compile"):
            setattr(self, name, getattr(metrics, name).labels(model))
        self._success = metrics.request_success
        self._model = model
        self._finished: dict[str, _Tally] = {}

    def finished(self, reason: str) -> _Tally:
        """The request_success child of this model and finish `reason`."""
        child = self._finished.get(reason)
        if child is None:
            child = self._finished[reason] = _Tally(self._success.labels(self._model, reason))
        return child


class _Tally:
    """A counter's or histogram's child updated as its own `inc` / `observe` update it, less the checks they make on
    every call (a child of a labelled parent, an amount not below zero: the gateway's own, always so) and the value
    holder's lock (~2 K instructions an update, over half a generation's `record_request`): every update of a
    `_Tally` runs on the event loop's thread, and a scrape from any thread reads each float whole. A histogram's
    bucket is found by bisection rather than a loop. Writes prometheus_client's value holders:
    tests/gateway/test_metrics.py checks the exposition against the library's own updates. Holders of another kind
    than the in-memory one (prometheus_client's multiprocess mode, PROMETHEUS_MULTIPROC_DIR: each update written to
    a file) are updated through the child's own `inc` / `observe`."""

    __slots__ = ("inc", "observe")

    def __init__(self, child: Any):
        if isinstance(child, Histogram):
            total, bounds, buckets = child._sum, child._upper_bounds, child._buckets

            def observe(amount: float) -> None:
                total._value += amount
                if not isnan(amount):  # NaN falls in no bucket (the library's loop finds none)
                    buckets[bisect_left(bounds, amount)]._value += 1

            self.observe = observe if type(total) is MutexValue else child.observe
        else:
            value = child._value

            def inc(amount: float) -> None:
                value._value += amount

            self.inc = inc if type(value) is MutexValue else child.inc


class RouterMetrics(RouterObserver):
    """One model's Router events → the retry and backend-error counters (and the request's replica)."""

    def __init__(self, metrics: GatewayMetrics, model: str):
        self._metrics = metrics
        self._model = model

    def dispatched(self, replica: str) -> None:
        note_dispatch(replica)
        note_replica(replica)

    def retried(self, replica: str, error: BackendError) -> None:
        self._metrics.retries.labels(self._model, replica).inc()
        note_failover(replica)
        note_replica_failed(replica, error)

    def failed(self, replica: str, error: BackendError) -> None:
        self._metrics.backend_errors.labels(self._model, replica, str(error.status)).inc()


class LoopTasksCollector(Collector):
    """gateway:event_loop_tasks: asyncio tasks alive in the serving loop at scrape time (a leak shows as growth)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            tasks = len(asyncio.all_tasks())
        except RuntimeError:  # scraped outside a running loop (render() called from a test's thread)
            return
        yield GaugeMetricFamily(
            "gateway:event_loop_tasks", "asyncio tasks alive in the gateway's event loop", value=tasks
        )


class ScrapedValue(Collector):
    """One unlabelled counter or gauge (`family`) read at scrape time from `value`."""

    def __init__(
        self,
        family: type[CounterMetricFamily | GaugeMetricFamily],
        name: str,
        documentation: str,
        value: Callable[[], float],
    ):
        self._family, self._name, self._documentation, self._value = family, name, documentation, value

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield self._family(self._name, self._documentation, value=self._value())


def policy_collectors(
    store_errors: Callable[[], int],
    policy_problems: Callable[[], int],
    settles_pending: Callable[[], int],
    settles_dropped: Callable[[], int],
    restores: Callable[[], int],
) -> list[ScrapedValue]:
    """gateway:limiter_store_errors_total (calls to the limits' store that failed or timed out, each answered by the
    tenant's on_store_error), gateway:policy_problems (policy files the last load rejected, start-up included),
    gateway:limiter_settles_pending (settlements the store missed, waiting to be tried again),
    gateway:limiter_settles_dropped_total (those left to their lease: the backlog full, given up, or at exit) and
    gateway:limiter_store_restores_total (times a tenant's open admissions were registered again after the store
    lost its data: a Redis restart without persistence)."""
    return [
        ScrapedValue(
            CounterMetricFamily,
            "gateway:limiter_store_errors",
            "Calls to the limits' store that failed or timed out (each tenant's on_store_error applied)",
            store_errors,
        ),
        ScrapedValue(
            GaugeMetricFamily,
            "gateway:policy_problems",
            "Policy files the last load rejected (each keeps its last good version; one never loaded, no tenant)",
            policy_problems,
        ),
        ScrapedValue(
            GaugeMetricFamily,
            "gateway:limiter_settles_pending",
            "Settlements the limits' store missed, waiting to be tried again (bounded)",
            settles_pending,
        ),
        ScrapedValue(
            CounterMetricFamily,
            "gateway:limiter_settles_dropped",
            "Settlements the limits' store missed and the gateway stopped trying (their reservations expire by lease)",
            settles_dropped,
        ),
        ScrapedValue(
            CounterMetricFamily,
            "gateway:limiter_store_restores",
            "Times a tenant's open admissions were registered again after the limits' store lost its data",
            restores,
        ),
    ]


class RunningCollector(Collector):
    """gateway:num_requests_running, counted at scrape time from the requests in flight that are generating."""

    def __init__(self, in_flight: set[RequestRecord], models: list[str]):
        self._in_flight = in_flight
        self._models = models

    def collect(self) -> Iterator[GaugeMetricFamily]:
        running = GaugeMetricFamily(
            "gateway:num_requests_running", "Generations in flight in the gateway", labels=["model_name"]
        )
        counts = dict.fromkeys(self._models, 0)
        for record in list(self._in_flight):
            if record.generating:
                counts[record.model] = counts.get(record.model, 0) + 1
        for model, count in counts.items():
            running.add_metric([model], count)
        yield running

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())


class ReplicaCollector(Collector):
    """Per-replica gauges read from each model's Router at scrape time."""

    def __init__(self, registry: ModelRegistry):
        self._registry = registry

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["model_name", "replica"]
        running = GaugeMetricFamily(
            "gateway:backend_requests_running", "Requests outstanding per replica", labels=labels
        )
        healthy = GaugeMetricFamily(
            "gateway:backend_healthy", "1 when the replica's health check passes", labels=labels
        )
        breaker = GaugeMetricFamily(
            "gateway:backend_circuit_breaker_state",
            "Circuit breaker per replica: 0 closed, 1 half-open, 2 open",
            labels=labels,
        )
        for served in self._registry:
            if not isinstance(served.backend, Router):
                continue
            for replica in served.backend.replicas:
                key = [served.id, replica.url]
                running.add_metric(key, replica.outstanding)
                healthy.add_metric(key, 1 if replica.healthy else 0)
                breaker.add_metric(key, BREAKER_VALUES[replica.breaker.state])
        yield running
        yield healthy
        yield breaker

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())
