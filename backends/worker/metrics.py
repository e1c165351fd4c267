"""The worker's Prometheus metrics under vLLM's names, so the Gateway API Inference Extension's endpoint picker
(and vLLM dashboards) read a pool of bundled workers as they read vLLM pods.

Load gauges (running, waiting, KV-cache use) and the grammar cache's counts are read from the engine at scrape
time; tokens and time to first token are counted as generations run.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from backends.vllm_buckets import TTFT_BUCKETS
from backends.worker.engine import Engine
from backends.worker.grammar import GrammarCache


class WorkerMetrics:
    """One worker's registry: scrape-time engine gauges plus token counters and the TTFT histogram."""

    def __init__(self, model_name: str, engine: Engine, grammars: GrammarCache):
        self.registry = CollectorRegistry()
        self.model_name = model_name
        labels = ["model_name"]
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Prefill tokens processed", labels, registry=self.registry
        ).labels(model_name)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Generation tokens processed", labels, registry=self.registry
        ).labels(model_name)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token",
            labels,
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        ).labels(model_name)
        self.registry.register(_EngineCollector(model_name, engine, grammars))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineCollector(Collector):
    def __init__(self, model_name: str, engine: Engine, grammars: GrammarCache):
        self._model = [model_name]
        self._engine = engine
        self._grammars = grammars

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        load = self._engine.load()
        stats = self._grammars.stats
        prefixes = self._engine.prefix_cache
        decodes = self._engine.decode_counts()
        series = (
            (GaugeMetricFamily, "vllm:num_requests_running", "Requests in the running batch", load.running),
            (GaugeMetricFamily, "vllm:num_requests_waiting", "Requests waiting for a batch slot", load.waiting),
            (GaugeMetricFamily, "vllm:kv_cache_usage_perc", "KV-cache usage: 1 means 100 percent", load.kv_cache_usage),
            (
                CounterMetricFamily,
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens",
                prefixes.queries,
            ),
            (
                CounterMetricFamily,
                "vllm:prefix_cache_hits",
                "Prefix cache hits, in terms of number of cached tokens",
                prefixes.hits,
            ),
            (
                GaugeMetricFamily,
                "worker:cuda_graphs_enabled",
                "1 when decode steps replay CUDA graphs (--cuda-graphs), else 0",
                int(self._engine.decode_path().startswith("on")),
            ),
            (
                CounterMetricFamily,
                "worker:decode_graph_replays",
                "Decode steps run by replaying a CUDA graph",
                decodes["decode_graph_replays"],
            ),
            (
                CounterMetricFamily,
                "worker:decode_eager_steps",
                "Decode steps run by the eager forward",
                decodes["decode_eager_steps"],
            ),
            (CounterMetricFamily, "worker:grammar_cache_hits", "Grammars found compiled in the cache", stats.hits),
            (CounterMetricFamily, "worker:grammar_cache_misses", "Grammars compiled", stats.misses),
            (
                CounterMetricFamily,
                "worker:grammar_compile_seconds",
                "Time spent compiling grammars",
                stats.compile_seconds,
            ),
        )
        for kind, name, documentation, value in series:
            family = kind(name, documentation, labels=["model_name"])
            family.add_metric(self._model, value)
            yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())
