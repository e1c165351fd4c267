"""Server limits over real HTTP: the concurrency limit's 503, and the limits read from config and CLI."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from backends.sglang import SGLangBackend
from gateway.app import create_app
from gateway.models.registry import ModelRegistry, served_model_from_checkpoint
from gateway.process.config import ConfigError, load_config
from tests.gateway.http_server import serve
from tests.gateway.sglang_standin import Script, SGLangStandIn
from tests.gateway.test_app import MODEL, USER


def test_past_the_concurrency_limit_a_request_gets_a_503_with_retry_after(checkpoint):
    model = served_model_from_checkpoint(MODEL, checkpoint, "hermes", None)
    server = SGLangStandIn(incremental=True)
    ids = model.encoder.encode_plain("Sunny and warm.") + [2]
    server.script = lambda body: Script(
        ids=ids, hold_after=1 if body["sampling_params"]["max_new_tokens"] == 9 else None
    )
    with serve(server.app) as url:
        backend = SGLangBackend(url, incremental=True)
        app = create_app(ModelRegistry([dataclasses.replace(model, backend=backend)]), max_concurrency=1)
        with serve(app) as base, httpx.Client(base_url=base, timeout=30) as client:
            held = {"model": MODEL, "messages": USER, "stream": True, "max_tokens": 9}
            with (
                httpx.Client(base_url=base, timeout=30) as other,
                other.stream("POST", "/v1/chat/completions", json=held) as r,
            ):
                assert r.status_code == 200
                refused = client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER})
                assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
                error = refused.json()["error"]
                assert error["code"] == "too_many_requests_in_flight" and error["type"] == "server_error"
                assert client.get("/health").status_code == 200 and client.get("/metrics").status_code == 200
            for _ in range(100):  # the held stream's slot frees once the gateway sees the hang-up
                answer = client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER})
                if answer.status_code == 200:
                    break
            assert answer.status_code == 200


def test_server_limits_from_the_config_file(tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "models: [{id: m, backend: {type: none}}]\nserver: {max_body_bytes: 1000, max_concurrency: 8, header_timeout_s: 3, send_timeout_s: 20, body_min_rate: 4096, max_waiting_heads: 9}\n"
    )
    limits = load_config(path).server
    assert (limits.max_body_bytes, limits.max_concurrency, limits.header_timeout_s) == (1000, 8, 3.0)
    assert (limits.send_timeout_s, limits.body_min_rate, limits.max_waiting_heads) == (20.0, 4096.0, 9)
    path.write_text("models: [{id: m, backend: {type: none}}]\nserver: {max_waiting_heads: 0}\n")
    with pytest.raises(ConfigError, match="server.max_waiting_heads"):
        load_config(path)
    path.write_text("models: [{id: m, backend: {type: none}}]\nserver: {max_concurrency: 0}\n")
    with pytest.raises(ConfigError, match="server.max_concurrency"):
        load_config(path)
    path.write_text("models: [{id: m, backend: {type: none}}]\nserver: {send_timeout_s: 0}\n")
    with pytest.raises(ConfigError, match="server.send_timeout_s"):
        load_config(path)
    path.write_text("models: [{id: m, backend: {type: none}}]\nserver: {body_min_rate: .inf}\n")
    with pytest.raises(ConfigError, match="server.body_min_rate: a positive number of bytes"):
        load_config(path)


def test_cli_limits_override_the_config(tmp_path):
    from gateway.cli import _serve_config, build_parser, override_limits

    path = tmp_path / "gateway.yaml"
    path.write_text("models: [{id: m, backend: {type: none}}]\nserver: {max_concurrency: 8}\n")
    args = build_parser().parse_args(
        ["serve", "--config", str(path), "--max-concurrency", "3", "--header-timeout", "2.5", "--send-timeout", "7"]
        + ["--body-min-rate", "1e5", "--max-waiting-heads", "40"]
    )
    config = _serve_config(args)
    assert config.server.max_waiting_heads == 512
    override_limits(config.server, args)
    assert (config.server.max_concurrency, config.server.max_body_bytes) == (3, 16 * 1024 * 1024)
    assert config.server.max_waiting_heads == 40
    assert (config.server.header_timeout_s, config.server.send_timeout_s, config.server.body_min_rate) == (2.5, 7, 1e5)


def test_the_grammar_compile_budget_from_config_and_cli(tmp_path):
    from gateway.cli import _serve_config, build_parser, override_limits
    from gateway.process.limits import DEFAULT_GRAMMAR_COMPILE_S

    path = tmp_path / "gateway.yaml"
    path.write_text("models: [{id: m, backend: {type: none}}]\n")
    assert load_config(path).server.grammar_compile_s == DEFAULT_GRAMMAR_COMPILE_S
    path.write_text("models: [{id: m, backend: {type: none}}]\nserver: {grammar_compile_s: 0.5}\n")
    assert load_config(path).server.grammar_compile_s == 0.5
    path.write_text("models: [{id: m, backend: {type: none}}]\nserver: {grammar_compile_s: null}\n")
    assert load_config(path).server.grammar_compile_s is None
    path.write_text("models: [{id: m, backend: {type: none}}]\nserver: {grammar_compile_s: -1}\n")
    with pytest.raises(ConfigError, match="server.grammar_compile_s"):
        load_config(path)
    path.write_text("models: [{id: m, backend: {type: none}}]\n")
    for flag, expected in (("5", 5.0), ("0", None)):
        args = build_parser().parse_args(["serve", "--config", str(path), "--grammar-compile-budget", flag])
        config = _serve_config(args)
        override_limits(config.server, args)
        assert config.server.grammar_compile_s == expected
