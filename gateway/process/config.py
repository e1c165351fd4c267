"""Gateway configuration: which models to serve, with which family and backend.

A YAML (or JSON) file:

    models:
      - id: smollm2-135m-instruct     # the id clients send as "model"
        family: hermes                # gateway/families registry name; omitted = inferred from the
                                      #   checkpoint (architecture, chat template, added tokens)
        checkpoint: /path/to/model    # GGUF file, HF directory, tokenizer.json, or package:NAME
                                      # (tokenizer.json of an installed package); omitted = embedded
        options: {}                   # family options, e.g. chat_template: <jinja text>
        default_max_tokens: 1024      # for requests that name no max_tokens (default: the context left)
        max_running: 8                # with --policies: choices sent to the backend at once; more wait in the
                                      #   model's fair queue (default: a bundled worker's max_batch, else none);
                                      #   for this gateway: --workers N divides it exactly (at least 1 each)
        backend:
          type: worker                # worker (bundled, started here) | sglang | vllm | none (tokenize only)
          threads: auto               # worker only: auto (measured, within the cores and CPU quota) or a number
          context_length: 4096        #   (also max_batch, max_waiting, weights_dtype, device, cuda_graphs, prefix_cache,
                                      #   context_length: KV cache per slot; default the model's)
          url: http://host:30000      # sglang and vllm: one replica, or several:
          urls: [http://a:30000, http://b:30000]
          dns: {host: sglang.ns.svc.cluster.local, port: 30000, scheme: http, refresh_s: 10}
                                      #   or every address of a DNS name (a Kubernetes headless service)
          request_timeout_s: 600      # deadline of one request, first try to last token (null: none)
          stall_timeout_s: 60         # once output started, the longest silence before the replica counts
                                      #   as failed (null: none)
          head_timeout_s: 30          # a replica that took the request but sent no answer's head (status line)
                                      #   within this is failed and the request moves on (null: none)
          max_attempts: 3             # replicas tried before the first token (connect failure, reset, silence,
                                      #   429, 5xx); never one twice, never after output, within request_timeout_s
          health_interval_s: 5        # active GET /health of every replica
          xgrammar: 0.2.7             # the backend's xgrammar (default: sglang 0.2.7, vllm 0.2.8, worker
                                      #   the installed one); a grammar it would ignore is refused
          incremental: false          # sglang: server runs with --incremental-streaming-output
          api: completions            # vllm: completions (/v1/completions) | generate (/inference/v1/generate,
                                      #   a server started with --tokens-only)
          model: served-name          # vllm: its served model name (default: the first of /v1/models)

    server:                           # optional; the CLI's --max-body-bytes / --max-concurrency override it
      max_body_bytes: 16777216        # a larger request body is a 413
      max_concurrency: 256            # requests served at once; past it a 503 with retry-after (default: none)
      header_timeout_s: 10            # a request's headers must arrive within this (slow-loris; default: 10); also
                                      #   the longest pause inside a body, and its grace before body_min_rate
      body_min_rate: 65536            # bytes a second a body must average past that grace (default: 65536)
      send_timeout_s: 60              # a client taking no bytes of its answer this long is cut off (default: 60)
      max_waiting_heads: 512          # connections waiting for a request's head at once, per process; past it the
                                      #   one waiting longest is closed (default: 512)
      workers: 2                      # gateway processes sharing the port (default: 1; the CLI's --workers wins)
      grammar_compile_s: 2            # CPU seconds a request's grammar may cost to build and compile, in a child
                                      #   process killed past it (400 naming the schema); null: no budget

    tracing:                          # optional; OpenTelemetry spans over OTLP/HTTP (--otlp-endpoint overrides)
      endpoint: http://otel-collector:4318   # the collector (/v1/traces added); default: OTEL_EXPORTER_OTLP_*
      service_name: llm-gateway       # default: OTEL_SERVICE_NAME, else llm-gateway
      sample_ratio: 0.1               # new traces kept (a caller's sampled flag is followed); default: OTEL_TRACES_SAMPLER

With no file, the gateway serves the embedded model on a bundled worker.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from backends.checkpoint import EMBEDDED_MODEL_ID, PACKAGE_PREFIX
from gateway.observability.tracing import TracingConfig
from gateway.process.limits import ServerLimits
from gateway.process.supervisor import WorkerOptions

BACKEND_TYPES = ("worker", "sglang", "vllm", "none")
VLLM_APIS = ("completions", "generate")
PINNED_XGRAMMAR = {"sglang": "0.2.7", "vllm": "0.2.8"}
"""The xgrammar versions SGLang 0.5.23 and vLLM 0.33.0 pin in their own requirements."""
_XGRAMMAR_VERSION = re.compile(r"\d+\.\d+\.\d+")


class ConfigError(ValueError):
    """The configuration file is wrong; the message says where."""


@dataclass
class DNSConfig:
    host: str
    port: int
    scheme: str = "http"
    refresh_s: float = 10.0


@dataclass
class BackendConfig(WorkerOptions):
    """Where a model is served; the worker options (threads, device, ...) apply to a bundled worker only."""

    type: str = "worker"
    url: str | None = None
    urls: list[str] = field(default_factory=list)
    dns: DNSConfig | None = None
    request_timeout_s: float | None = 600.0
    stall_timeout_s: float | None = 60.0
    head_timeout_s: float | None = 30.0
    max_attempts: int = 3
    health_interval_s: float = 5.0
    xgrammar: str | None = None
    incremental: bool = False
    api: str = "completions"
    model: str | None = None


WORKER_SLOTS = 8
"""The bundled worker's default max_batch (backends/worker/__main__.py)."""


@dataclass
class ModelEntry:
    id: str
    family: str | None = None
    """A gateway/families registry name; None: inferred from the checkpoint at start-up."""
    checkpoint: Path | str | None = None
    """A path, or a `package:NAME` reference (see backends.checkpoint.load_checkpoint)."""
    options: dict[str, Any] = field(default_factory=dict)
    default_max_tokens: int | None = None
    backend: BackendConfig = field(default_factory=BackendConfig)
    max_running: int | None = None

    def gateway_slots(self) -> int | None:
        """How many choices the model's backends run at once, for the whole gateway (all its `--workers` processes):
        `max_running`, else a bundled worker's batch; None when unknown."""
        if self.max_running is not None:
            return self.max_running
        if self.backend.type == "worker":
            return self.backend.max_batch or WORKER_SLOTS
        return None


@dataclass
class GatewayConfig:
    models: list[ModelEntry]
    server: ServerLimits = field(default_factory=ServerLimits)
    tracing: TracingConfig = field(default_factory=TracingConfig)


EMBEDDED_DEFAULT_MAX_TOKENS = 512
"""max_tokens of a request to the embedded model that names none (about 20 s of CPU decoding, not the 8K context)."""


def default_config() -> GatewayConfig:
    """The embedded default: SmolLM2-135M-Instruct on a bundled worker."""
    return GatewayConfig(models=[ModelEntry(id=EMBEDDED_MODEL_ID, default_max_tokens=EMBEDDED_DEFAULT_MAX_TOKENS)])


def load_config(path: str | Path) -> GatewayConfig:
    """Read and check a configuration file."""
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{p}: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("models"), list) or not raw["models"]:
        raise ConfigError(f"{p}: expected a mapping with a non-empty 'models' list")
    models = [_model_entry(m, f"{p}: models[{i}]", p.parent) for i, m in enumerate(raw["models"])]
    ids = [m.id for m in models]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{p}: duplicate model ids in {ids}")
    return GatewayConfig(
        models=models,
        server=_server_limits(raw.get("server") or {}, f"{p}: server"),
        tracing=_tracing(raw.get("tracing") or {}, f"{p}: tracing"),
    )


def _tracing(raw: Any, where: str) -> TracingConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    _only(raw, set(TracingConfig.__dataclass_fields__), where)
    for key in ("endpoint", "service_name"):
        if raw.get(key) is not None and (not isinstance(raw[key], str) or not raw[key]):
            raise ConfigError(f"{where}.{key}: a non-empty string is required")
    endpoint = raw.get("endpoint")
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise ConfigError(f"{where}.endpoint: an http:// or https:// URL is required")
    ratio = raw.get("sample_ratio")
    if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1):
        raise ConfigError(f"{where}.sample_ratio: a number from 0 to 1 is required")
    return TracingConfig(**raw)


def _server_limits(raw: Any, where: str) -> ServerLimits:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    _only(
        raw,
        {
            "max_body_bytes",
            "max_concurrency",
            "header_timeout_s",
            "send_timeout_s",
            "body_min_rate",
            "max_waiting_heads",
            "workers",
            "grammar_compile_s",
        },
        where,
    )
    limits = ServerLimits()
    if "grammar_compile_s" in raw:
        budget = raw["grammar_compile_s"]
        if budget is not None and (not isinstance(budget, int | float) or isinstance(budget, bool) or budget <= 0):
            raise ConfigError(f"{where}.grammar_compile_s: a positive number of seconds (or null) is required")
        limits.grammar_compile_s = None if budget is None else float(budget)
    for key, unit in (("header_timeout_s", "seconds"), ("send_timeout_s", "seconds"), ("body_min_rate", "bytes")):
        number = raw.get(key)
        if number is not None:
            if not isinstance(number, int | float) or isinstance(number, bool) or not 0 < number < math.inf:
                raise ConfigError(f"{where}.{key}: a positive number of {unit} is required")
            setattr(limits, key, float(number))
    for key in ("max_body_bytes", "max_concurrency", "max_waiting_heads", "workers"):
        value = raw.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{where}.{key}: a positive integer is required")
        setattr(limits, key, value)
    return limits


def _model_entry(raw: Any, where: str, base: Path) -> ModelEntry:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    _only(raw, {"id", "family", "checkpoint", "options", "default_max_tokens", "backend", "max_running"}, where)
    if not isinstance(raw.get("id"), str) or not raw["id"]:
        raise ConfigError(f"{where}.id: a non-empty string is required")
    backend_raw = raw.get("backend") or {}
    if not isinstance(backend_raw, dict):
        raise ConfigError(f"{where}.backend: expected a mapping")
    backend = _backend(backend_raw, f"{where}.backend")
    checkpoint = raw.get("checkpoint")
    if checkpoint is not None and not str(checkpoint).startswith(PACKAGE_PREFIX):
        checkpoint = (base / Path(checkpoint).expanduser()).resolve()
        if not checkpoint.exists():
            raise ConfigError(f"{where}.checkpoint: {checkpoint} does not exist")
    default_max_tokens = raw.get("default_max_tokens")
    if default_max_tokens is not None and (not isinstance(default_max_tokens, int) or default_max_tokens < 1):
        raise ConfigError(f"{where}.default_max_tokens: a positive integer is required")
    max_running = raw.get("max_running")
    if max_running is not None and (
        isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 1
    ):
        raise ConfigError(f"{where}.max_running: a positive integer is required")
    options = raw.get("options") or {}
    if not isinstance(options, dict):
        raise ConfigError(f"{where}.options: expected a mapping")
    return ModelEntry(
        id=raw["id"],
        family=known_family(raw.get("family"), f"{where}.family"),
        checkpoint=checkpoint,
        options=options,
        default_max_tokens=default_max_tokens,
        backend=backend,
        max_running=max_running,
    )


def known_family(name: Any, where: str) -> str | None:
    """`name` when it is a registered family (None stays None: the family is inferred); ConfigError otherwise."""
    if name is None:
        return None
    from gateway.families import family_names  # every family package's claims, none of its code

    if not isinstance(name, str) or name not in family_names():
        raise ConfigError(f"{where}: unknown model family {name!r}; known: {', '.join(family_names())}")
    return name


def _backend(raw: dict, where: str) -> BackendConfig:
    _only(raw, set(BackendConfig.__dataclass_fields__), where)
    dns = raw.get("dns")
    if dns is not None:
        if not isinstance(dns, dict):
            raise ConfigError(f"{where}.dns: expected a mapping")
        _only(dns, set(DNSConfig.__dataclass_fields__), f"{where}.dns")
        if not isinstance(dns.get("host"), str) or not isinstance(dns.get("port"), int):
            raise ConfigError(f"{where}.dns: a host (string) and a port (integer) are required")
        raw = {**raw, "dns": DNSConfig(**dns)}
    backend = BackendConfig(**raw)
    if backend.type not in BACKEND_TYPES:
        raise ConfigError(f"{where}.type: {backend.type!r} is not one of {BACKEND_TYPES}")
    if not isinstance(backend.urls, list) or not all(isinstance(u, str) and u for u in backend.urls):
        raise ConfigError(f"{where}.urls: expected a list of URLs")
    sources = sum((bool(backend.url), bool(backend.urls), backend.dns is not None))
    if backend.type in ("sglang", "vllm") and sources != 1:
        raise ConfigError(f"{where}: type {backend.type} needs exactly one of url, urls or dns")
    if backend.type not in ("sglang", "vllm") and sources:
        raise ConfigError(f"{where}: url, urls and dns are for sglang and vllm backends")
    if backend.api not in VLLM_APIS:
        raise ConfigError(f"{where}.api: {backend.api!r} is not one of {VLLM_APIS}")
    for name in ("request_timeout_s", "stall_timeout_s", "head_timeout_s", "health_interval_s"):
        value = getattr(backend, name)
        if value is not None and (not isinstance(value, int | float) or value <= 0):
            raise ConfigError(f"{where}.{name}: a positive number of seconds is required")
    if backend.health_interval_s is None:
        raise ConfigError(f"{where}.health_interval_s: a positive number of seconds is required")
    if not isinstance(backend.max_attempts, int) or backend.max_attempts < 1:
        raise ConfigError(f"{where}.max_attempts: a positive integer is required")
    _worker_options(backend, where)
    if backend.prefix_cache is not None and not isinstance(backend.prefix_cache, bool):
        raise ConfigError(f"{where}.prefix_cache: true or false is required")
    if backend.xgrammar is not None and not _XGRAMMAR_VERSION.fullmatch(str(backend.xgrammar)):
        raise ConfigError(f"{where}.xgrammar: a version like 0.2.7 is required")
    return backend


def worker_threads(value: Any) -> int | None:
    """A bundled worker's `threads`: a positive integer, or "auto" (None: the worker measures, within the cores and
    CPU quota it has). ValueError otherwise."""
    if value is None or value == "auto":
        return None
    if isinstance(value, str) and value.isdecimal():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError('a positive integer or "auto" is required')
    return value


def _worker_options(backend: BackendConfig, where: str) -> None:
    """The bundled worker's options checked here, not by a worker that would exit at start-up."""
    try:
        backend.threads = worker_threads(backend.threads)
    except ValueError as exc:
        raise ConfigError(f"{where}.threads: {exc}") from None
    for name, least in (("max_batch", 1), ("context_length", 1), ("max_waiting", 0)):
        value = getattr(backend, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            kind = "a positive integer" if least else "a non-negative integer"
            raise ConfigError(f"{where}.{name}: {kind} is required")
    if backend.cuda_graphs is False:  # YAML reads a bare `off` as false
        backend.cuda_graphs = "off"
    for name, choices in (
        ("weights_dtype", ("fp32", "bf16")),
        ("device", ("cpu", "cuda")),
        ("cuda_graphs", ("auto", "off")),
    ):
        if getattr(backend, name) not in (None, *choices):
            raise ConfigError(f"{where}.{name}: one of {', '.join(choices)} is required")


def _only(raw: dict, allowed: set[str], where: str) -> None:
    unknown = set(raw) - allowed
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
