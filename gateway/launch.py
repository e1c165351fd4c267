"""Turn a configuration into running parts: checkpoints loaded, workers started, backends connected."""

from __future__ import annotations

import sys
from contextlib import ExitStack

from backends.base import Backend
from backends.checkpoint import load_checkpoint
from backends.sglang import SGLangBackend
from backends.vllm import VLLMBackend
from gateway.config import GatewayConfig, ModelEntry
from gateway.model import ModelRegistry, ServedModel, served_model_from_checkpoint
from gateway.supervisor import WorkerProcess, WorkerSpec


def _say(message: str) -> None:
    print(f"gateway: {message}", file=sys.stderr, flush=True)


def start_models(config: GatewayConfig, stack: ExitStack) -> ModelRegistry:
    """Load every configured model; workers started here are stopped when `stack` closes."""
    return ModelRegistry([_start_model(entry, stack) for entry in config.models])


def _start_model(entry: ModelEntry, stack: ExitStack) -> ServedModel:
    _say(f"{entry.id}: loading tokenizer from {entry.checkpoint or 'the embedded model'}")
    checkpoint = load_checkpoint(entry.checkpoint)
    backend = _start_backend(entry, stack)
    model = served_model_from_checkpoint(
        entry.id, checkpoint, entry.family, backend, entry.options, entry.default_max_tokens
    )
    if entry.backend.context_length:
        model.context_length = min(model.context_length, entry.backend.context_length)
    return model


def _start_backend(entry: ModelEntry, stack: ExitStack) -> Backend | None:
    cfg = entry.backend
    if cfg.type == "none":
        return None
    if cfg.type == "sglang":
        return SGLangBackend(cfg.url, incremental=cfg.incremental)
    if cfg.type == "vllm":
        return VLLMBackend(cfg.url, api=cfg.api, model=cfg.model)
    _say(f"{entry.id}: starting the bundled worker")
    worker = WorkerProcess(
        WorkerSpec(
            checkpoint=entry.checkpoint,
            threads=cfg.threads,
            device=cfg.device,
            max_batch=cfg.max_batch,
            weights_dtype=cfg.weights_dtype,
            context_length=cfg.context_length,
        )
    )
    stack.callback(worker.stop)
    url = worker.wait_ready()
    _say(f"{entry.id}: worker ready at {url} (pid {worker.pid})")
    return SGLangBackend(url, incremental=True)
