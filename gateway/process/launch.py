"""Turn a configuration into running parts: checkpoints loaded, workers started, backends connected."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from importlib.metadata import version
from typing import TYPE_CHECKING

from backends.base import Backend
from backends.checkpoint import Checkpoint, load_checkpoint
from backends.discovery import DNSService
from backends.router import Router, RoutingPolicy
from backends.sglang import SGLangBackend
from backends.vllm import VLLMBackend
from backends.xgrammar_compile import tokenizer_info
from backends.xgrammar_core import XGrammarLayoutError, xgrammar
from gateway.families import FamilyInferenceError, infer_family
from gateway.families.recognition import CheckpointFacts
from gateway.grammars.budget import GrammarBudget
from gateway.models.registry import ModelRegistry, ServedModel, served_model_from_checkpoint
from gateway.models.slots import ChoiceSlots
from gateway.process.config import PINNED_XGRAMMAR, BackendConfig, GatewayConfig, ModelEntry
from gateway.process.policy_gate import backend_slots
from gateway.process.supervisor import WorkerSpec, WorkerSupervisor

if TYPE_CHECKING:
    import xgrammar as xgr


def _say(message: str) -> None:
    print(f"gateway: {message}", file=sys.stderr, flush=True)


def start_models(config: GatewayConfig, stack: ExitStack, worker_urls: dict[str, str] | None = None) -> ModelRegistry:
    """Load every configured model; workers started here are stopped when `stack` closes, and
    restarted by the registry's background tasks if they die. A model in `worker_urls` uses the bundled
    worker another process started (and supervises) at that URL."""
    background: list[Callable[[], Awaitable[None]]] = []
    budget = config.server.grammar_compile_s
    urls = worker_urls or {}
    load = functools.cache(load_checkpoint)  # models on one checkpoint share its tokenizer (and what is built on it)
    views: dict[int, Callable[[], xgr.TokenizerInfo]] = {}  # by checkpoint (each kept alive by `load`)

    def vocabulary_view(checkpoint: Checkpoint) -> Callable[[], xgr.TokenizerInfo]:
        """xgrammar's view of the checkpoint's vocabulary, built when first needed (~1 s for 150K tokens): one for
        the models sharing a checkpoint, not one each."""
        build = functools.partial(tokenizer_info, checkpoint, checkpoint.vocab_size)
        return views.setdefault(id(checkpoint), functools.cache(build))

    models = [
        _start_model(entry, stack, background, urls.get(entry.id), load, vocabulary_view, budget)
        for entry in config.models
    ]
    for model in models:
        if model.grammar_budget is not None:
            stack.callback(model.grammar_budget.close)
    return ModelRegistry(models, background)


def import_xgrammar() -> None:
    """xgrammar's grammar compiler loaded now (`--grammar-warmup`, in a thread beside the models' start), not by the
    first request needing a grammar. Its error (XGrammarLayoutError) is raised again, and reported, by
    `warm_grammars`."""
    with contextlib.suppress(XGrammarLayoutError):
        xgrammar()


def warm_grammars(registry: ModelRegistry) -> None:
    """Each compile budget's view of its vocabulary built now (`--grammar-warmup`), so that the first request
    needing a grammar does not wait for it. XGrammarLayoutError when xgrammar cannot be loaded."""
    xgrammar()  # a model without a compile budget builds its grammars in this process
    for model in registry:
        if model.grammar_budget is not None:
            model.grammar_budget.prepare()


def start_workers(config: GatewayConfig, stack: ExitStack) -> tuple[dict[str, str], list[WorkerSupervisor]]:
    """Only the bundled workers (for a group of gateway processes, which share them): URL by model id and
    their supervisors; a worker that dies comes back on the same port, so the URLs stay valid."""
    started = {entry.id: _start_worker(entry, stack) for entry in config.models if entry.backend.type == "worker"}
    for supervisor, _ in started.values():
        supervisor.keep_port()
    return {model: url for model, (_, url) in started.items()}, [supervisor for supervisor, _ in started.values()]


def _start_model(
    entry: ModelEntry,
    stack: ExitStack,
    background: list[Callable[[], Awaitable[None]]],
    worker_url: str | None,
    load: Callable[[str | None], Checkpoint],
    vocabulary_view: Callable[[Checkpoint], Callable[[], xgr.TokenizerInfo]],
    grammar_compile_s: float | None = None,
) -> ServedModel:
    _say(f"{entry.id}: loading tokenizer from {entry.checkpoint or 'the embedded model'}")
    checkpoint = load(entry.checkpoint)
    family = entry.family or _inferred_family(entry.id, checkpoint)
    if worker_url is not None and entry.backend.type == "worker":
        backend: Backend | None = _router(entry.backend, lambda url: SGLangBackend(url, incremental=True), [worker_url])
    else:
        backend = _start_backend(entry, stack, background)
    model = served_model_from_checkpoint(entry.id, checkpoint, family, backend, entry.options, entry.default_max_tokens)
    model.encoder.text_bound  # noqa: B018  (the prompt character bound read now, not by the first long prompt)
    if entry.backend.context_length:
        model.context_length = min(model.context_length, entry.backend.context_length)
    model.grammar_target = entry.backend.xgrammar or PINNED_XGRAMMAR.get(entry.backend.type) or version("xgrammar")
    slots = backend_slots(entry)
    if slots is not None and backend is not None:
        model.choice_slots = ChoiceSlots(slots)
    if grammar_compile_s is not None:
        model.grammar_budget = GrammarBudget(model.family, vocabulary_view(checkpoint), grammar_compile_s)
    return model


def _inferred_family(model_id: str, checkpoint: Checkpoint) -> str:
    """The family the checkpoint says it is (before any worker starts); the error names the model otherwise."""
    try:
        name = infer_family(CheckpointFacts.of(checkpoint))
    except FamilyInferenceError as exc:
        raise FamilyInferenceError(f"{model_id}: {exc}") from None
    _say(f"{model_id}: family {name}, inferred from the checkpoint")
    return name


def _start_backend(
    entry: ModelEntry, stack: ExitStack, background: list[Callable[[], Awaitable[None]]]
) -> Backend | None:
    cfg = entry.backend
    if cfg.type == "none":
        return None
    head = cfg.head_timeout_s
    if cfg.type == "sglang":
        return _router(cfg, lambda url: SGLangBackend(url, incremental=cfg.incremental, head_timeout=head))
    if cfg.type == "vllm":
        return _router(cfg, lambda url: VLLMBackend(url, api=cfg.api, model=cfg.model, head_timeout=head))
    supervisor, worker_url = _start_worker(entry, stack)
    router = _router(cfg, lambda url: SGLangBackend(url, incremental=True, head_timeout=head), [worker_url])
    background.append(functools.partial(supervisor.watch, lambda url: router.set_urls([url])))
    return router


def _router(cfg: BackendConfig, make_backend: Callable[[str], Backend], urls: list[str] | None = None) -> Router:
    """The model's replicas (`urls`, else the configured url, urls or DNS name) behind one Router."""
    policy = RoutingPolicy(
        max_attempts=cfg.max_attempts,
        request_timeout_s=cfg.request_timeout_s,
        stall_timeout_s=cfg.stall_timeout_s,
        health_interval_s=cfg.health_interval_s,
    )
    if cfg.dns is not None:
        dns = DNSService(cfg.dns.host, cfg.dns.port, cfg.dns.scheme, cfg.dns.refresh_s)
        return Router(make_backend, dns=dns, policy=policy)
    return Router(make_backend, urls=urls or cfg.urls or [cfg.url], policy=policy)


def _start_worker(entry: ModelEntry, stack: ExitStack) -> tuple[WorkerSupervisor, str]:
    """Start the bundled worker for `entry` and wait until it serves; its supervisor and URL."""
    cfg = entry.backend
    _say(f"{entry.id}: starting the bundled worker")
    spec = WorkerSpec.of(entry.checkpoint, cfg)
    supervisor = WorkerSupervisor(spec, name=f"{entry.id} worker")
    stack.callback(supervisor.stop)
    url = supervisor.start()
    _say(f"{entry.id}: worker ready at {url} (pid {supervisor.worker.pid})")
    return supervisor, url
