"""Gateway configuration: which models to serve, with which family and backend.

A YAML (or JSON) file:

    models:
      - id: smollm2-135m-instruct     # the id clients send as "model"
        family: hermes                # gateway/families registry name
        checkpoint: /path/to/model    # GGUF file, HF directory, tokenizer.json, or package:NAME
                                      # (tokenizer.json of an installed package); omitted = embedded
        options: {}                   # family options, e.g. chat_template: <jinja text>
        default_max_tokens: 1024      # for requests that name no max_tokens (default: the context left)
        backend:
          type: worker                # worker (bundled, started here) | sglang | vllm | none (tokenize only)
          threads: 2                  # worker only (also max_batch, weights_dtype, device,
          context_length: 4096        #   context_length: KV cache per slot; default the model's)
          url: http://host:30000      # sglang and vllm
          incremental: false          # sglang: server runs with --incremental-streaming-output
          api: completions            # vllm: completions (/v1/completions) | generate (/inference/v1/generate,
                                      #   a server started with --tokens-only)
          model: served-name          # vllm: its served model name (default: the first of /v1/models)

With no file, the gateway serves the embedded model on a bundled worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from backends.checkpoint import EMBEDDED_MODEL_ID, PACKAGE_PREFIX

BACKEND_TYPES = ("worker", "sglang", "vllm", "none")
VLLM_APIS = ("completions", "generate")


class ConfigError(ValueError):
    """The configuration file is wrong; the message says where."""


@dataclass
class BackendConfig:
    type: str = "worker"
    url: str | None = None
    incremental: bool = False
    api: str = "completions"
    model: str | None = None
    threads: int | None = None
    device: str | None = None
    max_batch: int | None = None
    weights_dtype: str | None = None
    context_length: int | None = None


@dataclass
class ModelEntry:
    id: str
    family: str = "hermes"
    checkpoint: Path | str | None = None
    """A path, or a `package:NAME` reference (see backends.checkpoint.load_checkpoint)."""
    options: dict[str, Any] = field(default_factory=dict)
    default_max_tokens: int | None = None
    backend: BackendConfig = field(default_factory=BackendConfig)


@dataclass
class GatewayConfig:
    models: list[ModelEntry]


def default_config() -> GatewayConfig:
    """The embedded default: SmolLM2-135M-Instruct on a bundled worker."""
    return GatewayConfig(models=[ModelEntry(id=EMBEDDED_MODEL_ID)])


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
    return GatewayConfig(models=models)


def _model_entry(raw: Any, where: str, base: Path) -> ModelEntry:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    _only(raw, {"id", "family", "checkpoint", "options", "default_max_tokens", "backend"}, where)
    if not isinstance(raw.get("id"), str) or not raw["id"]:
        raise ConfigError(f"{where}.id: a non-empty string is required")
    backend_raw = raw.get("backend") or {}
    if not isinstance(backend_raw, dict):
        raise ConfigError(f"{where}.backend: expected a mapping")
    _only(backend_raw, set(BackendConfig.__dataclass_fields__), f"{where}.backend")
    backend = BackendConfig(**backend_raw)
    if backend.type not in BACKEND_TYPES:
        raise ConfigError(f"{where}.backend.type: {backend.type!r} is not one of {BACKEND_TYPES}")
    if backend.type in ("sglang", "vllm") and not backend.url:
        raise ConfigError(f"{where}.backend.url: required for type {backend.type}")
    if backend.api not in VLLM_APIS:
        raise ConfigError(f"{where}.backend.api: {backend.api!r} is not one of {VLLM_APIS}")
    checkpoint = raw.get("checkpoint")
    if checkpoint is not None and not str(checkpoint).startswith(PACKAGE_PREFIX):
        checkpoint = (base / Path(checkpoint).expanduser()).resolve()
        if not checkpoint.exists():
            raise ConfigError(f"{where}.checkpoint: {checkpoint} does not exist")
    default_max_tokens = raw.get("default_max_tokens")
    if default_max_tokens is not None and (not isinstance(default_max_tokens, int) or default_max_tokens < 1):
        raise ConfigError(f"{where}.default_max_tokens: a positive integer is required")
    options = raw.get("options") or {}
    if not isinstance(options, dict):
        raise ConfigError(f"{where}.options: expected a mapping")
    return ModelEntry(
        id=raw["id"],
        family=raw.get("family", "hermes"),
        checkpoint=checkpoint,
        options=options,
        default_max_tokens=default_max_tokens,
        backend=backend,
    )


def _only(raw: dict, allowed: set[str], where: str) -> None:
    unknown = set(raw) - allowed
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
