"""Configuration files: replicas, DNS and routing settings are read and checked with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.process.config import ConfigError, DNSConfig, load_config


def config(tmp_path, backend: str):
    path = tmp_path / "gateway.yaml"
    path.write_text(f"models:\n  - id: m\n    backend: {backend}\n")
    return load_config(path)


def test_replicas_and_routing_settings(tmp_path):
    backend = (
        config(
            tmp_path,
            "{type: sglang, urls: [http://a:1, http://b:1], request_timeout_s: 30, max_attempts: 2, "
            "health_interval_s: 1.5, head_timeout_s: 7, xgrammar: 0.2.7}",
        )
        .models[0]
        .backend
    )
    assert backend.urls == ["http://a:1", "http://b:1"]
    assert (backend.request_timeout_s, backend.max_attempts, backend.health_interval_s) == (30, 2, 1.5)
    assert backend.head_timeout_s == 7
    assert backend.xgrammar == "0.2.7"


def test_dns_service(tmp_path):
    backend = config(tmp_path, "{type: vllm, dns: {host: vllm.ns.svc, port: 8000, refresh_s: 5}}").models[0].backend
    assert backend.dns == DNSConfig(host="vllm.ns.svc", port=8000, refresh_s=5)
    assert (
        config(tmp_path, "{type: sglang, url: http://a:1, request_timeout_s: null}").models[0].backend.request_timeout_s
        is None
    )


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ("{type: sglang}", "exactly one of url, urls or dns"),
        ("{type: sglang, url: http://a:1, urls: [http://b:1]}", "exactly one of url, urls or dns"),
        ("{type: worker, urls: [http://b:1]}", "for sglang and vllm backends"),
        ("{type: sglang, urls: http://a:1}", "backend.urls: expected a list"),
        ("{type: sglang, dns: {host: x}}", "a host (string) and a port (integer)"),
        ("{type: sglang, dns: {host: x, port: 1, ttl: 3}}", "backend.dns: unknown keys ['ttl']"),
        ("{type: sglang, url: http://a:1, request_timeout_s: 0}", "request_timeout_s: a positive number"),
        ("{type: sglang, url: http://a:1, health_interval_s: fast}", "health_interval_s: a positive number"),
        ("{type: sglang, url: http://a:1, max_attempts: 0}", "max_attempts: a positive integer"),
        ("{type: sglang, url: http://a:1, head_timeout_s: -1}", "head_timeout_s: a positive number"),
        ("{type: sglang, url: http://a:1, xgrammar: latest}", "xgrammar: a version like 0.2.7"),
        ("{threads: many}", 'threads: a positive integer or "auto"'),
        ("{threads: 0}", 'threads: a positive integer or "auto"'),
        ("{threads: true}", 'threads: a positive integer or "auto"'),
        ("{max_batch: 0}", "max_batch: a positive integer"),
        ("{context_length: 1.5}", "context_length: a positive integer"),
        ("{max_waiting: -1}", "max_waiting: a non-negative integer"),
        ("{weights_dtype: fp16}", "weights_dtype: one of fp32, bf16"),
        ("{device: tpu}", "device: one of cpu, cuda"),
        ("{cuda_graphs: on}", "cuda_graphs: one of auto, off"),
    ],
)
def test_bad_backend_settings_say_where(tmp_path, backend, message):
    with pytest.raises(ConfigError) as info:
        config(tmp_path, backend)
    assert message in str(info.value) and "models[0].backend" in str(info.value)


def test_cli_backend_urls_become_replicas():
    from gateway.cli import _serve_config, build_parser

    args = build_parser().parse_args(
        ["serve", "--backend-url", "http://a:1", "--backend-url", "http://b:1", "--request-timeout", "30"]
    )
    backend = _serve_config(args).models[0].backend
    assert (backend.type, backend.urls, backend.request_timeout_s) == ("sglang", ["http://a:1", "http://b:1"], 30)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--request-timeout", "0"])


def test_the_embedded_default_caps_max_tokens_unless_told_otherwise():
    from gateway.cli import _serve_config, build_parser
    from gateway.process.config import EMBEDDED_DEFAULT_MAX_TOKENS

    assert (
        _serve_config(build_parser().parse_args(["serve"])).models[0].default_max_tokens == EMBEDDED_DEFAULT_MAX_TOKENS
    )
    told = build_parser().parse_args(["serve", "--default-max-tokens", "64"])
    assert _serve_config(told).models[0].default_max_tokens == 64


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--family", "hermes"], "--family cannot be combined with --config: set `family`"),
        (
            ["--request-timeout", "30"],
            "--request-timeout cannot be combined with --config: set `backend.request_timeout_s`",
        ),
        (["--threads", "2"], "--threads cannot be combined with --config: set `backend.threads`"),
        (["--model-id", "m"], "--model-id cannot be combined with --config: set `id`"),
        (["--default-max-tokens", "9"], "--default-max-tokens cannot be combined with --config"),
        (["--backend-url", "http://a:1"], "--backend-url cannot be combined with --config"),
    ],
)
def test_per_model_flags_are_refused_beside_a_config_file(tmp_path, flags, message):
    from gateway.cli import _serve_config, build_parser

    path = tmp_path / "gateway.yaml"
    path.write_text("models: [{id: m, backend: {type: sglang, url: 'http://a:1'}}]\n")
    with pytest.raises(ConfigError, match=message.replace("`", "\\`").replace(".", "\\.")):
        _serve_config(build_parser().parse_args(["serve", "--config", str(path), *flags]))
    assert _serve_config(build_parser().parse_args(["serve", "--config", str(path)])).models[0].id == "m"


def test_the_request_timeout_defaults_to_600_without_the_flag():
    from gateway.cli import _serve_config, build_parser

    assert _serve_config(build_parser().parse_args(["serve"])).models[0].backend.request_timeout_s == 600


def test_a_config_backend_becomes_the_worker_flags(tmp_path):
    from gateway.process.supervisor import WorkerSpec

    backend = (
        config(tmp_path, "{threads: 2, max_batch: 4, weights_dtype: bf16, context_length: 512, cuda_graphs: off}")
        .models[0]
        .backend
    )
    argv = WorkerSpec.of(Path("/m.gguf"), backend).argv()
    assert argv[argv.index("backends.worker") + 1 :] == [
        "--host", "127.0.0.1", "--port", "0", "--grammar-compile-budget", "0", "--model", "/m.gguf",
        "--threads", "2", "--max-batch", "4", "--weights-dtype", "bf16", "--context-length", "512",
        "--cuda-graphs", "off",
    ]  # fmt: skip


def test_the_prefix_cache_option_is_a_worker_switch(tmp_path):
    from backends.worker.__main__ import parse_args
    from gateway.process.supervisor import WorkerSpec

    for value, flag, expected in (("false", "--no-prefix-cache", False), ("true", "--prefix-cache", True)):
        backend = config(tmp_path, f"{{prefix_cache: {value}}}").models[0].backend
        argv = WorkerSpec.of(None, backend).argv()
        assert argv[-1] == flag and parse_args(argv[3:]).prefix_cache is expected
    assert parse_args(["--disable-radix-cache"]).prefix_cache is False and parse_args([]).prefix_cache is True
    with pytest.raises(ConfigError, match="prefix_cache: true or false"):
        config(tmp_path, "{prefix_cache: 'no'}")


def test_worker_threads_are_a_number_or_auto(tmp_path):
    from gateway.cli import _serve_config, build_parser
    from gateway.process.supervisor import WorkerSpec

    assert config(tmp_path, "{threads: auto}").models[0].backend.threads is None  # the worker's own default
    assert "--threads" not in WorkerSpec.of(None, config(tmp_path, "{threads: auto}").models[0].backend).argv()
    assert config(tmp_path, "{threads: 3, max_waiting: 0}").models[0].backend.threads == 3
    assert _serve_config(build_parser().parse_args(["serve", "--threads", "auto"])).models[0].backend.threads is None
    assert _serve_config(build_parser().parse_args(["serve", "--threads", "2"])).models[0].backend.threads == 2
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--threads", "0"])
