"""OpenTelemetry spans over OTLP/HTTP: a gateway in front of the SGLang stand-in, its spans received by a real
HTTP server on 127.0.0.1 that decodes them as a collector does (tests/gateway/otlp_receiver.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import socket
import sys
from collections.abc import Iterator
from types import SimpleNamespace

import httpx
import pytest
import uvicorn
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from backends.router import Router, RoutingPolicy
from backends.sglang import SGLangBackend
from gateway.app import create_app
from gateway.cli import build_parser, main, uvicorn_config
from gateway.models.registry import ModelRegistry, served_model_from_checkpoint
from gateway.observability import otlp
from gateway.observability.otlp import Tracing
from gateway.observability.tracing import TracingConfig, traces_endpoint
from gateway.observability.tracing_setup import TracingUnavailable, start_tracing
from gateway.process.config import BackendConfig, ConfigError, GatewayConfig, ModelEntry, load_config
from gateway.process.limits import ServerLimits
from gateway.process.policy_gate import policy_gate
from tests.gateway.http_server import dead_url, serve, serve_connection
from tests.gateway.otlp_receiver import Collector
from tests.gateway.sglang_standin import Script, SGLangStandIn
from tests.gateway.test_app import MODEL, USER, WEATHER
from tests.gateway.test_metrics import samples, value

TOKENS = "Sunny and warm today."
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TWO_REPLICAS = "two-replicas"
"""A model over a replica that refuses every request (503), then the good backend."""


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    with Collector.running() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def model(checkpoint):
    return served_model_from_checkpoint(MODEL, checkpoint, "hermes", None)


@pytest.fixture(scope="module")
def backend(model) -> Iterator[SimpleNamespace]:
    server = SGLangStandIn(incremental=True)
    ids = model.encoder.encode_plain(TOKENS) + [2]
    server.script = lambda body: Script(ids=ids)
    with serve(server.app) as url:
        yield SimpleNamespace(server=server, url=url, n_ids=len(ids))


def _gateway(model, backend, tracing: Tracing | None, refusing_url: str | None = None):
    """The gateway serving `model` from `backend`, and with `refusing_url`, TWO_REPLICAS from it, then `backend`."""
    router = Router(lambda u: SGLangBackend(u, incremental=True), urls=[backend.url], policy=RoutingPolicy())
    models = [dataclasses.replace(model, backend=router)]
    if refusing_url is not None:
        two = Router(lambda u: SGLangBackend(u, incremental=True), urls=[refusing_url, backend.url])
        models.append(dataclasses.replace(model, id=TWO_REPLICAS, backend=two))
    return create_app(ModelRegistry(models), tracing=tracing)


@pytest.fixture(scope="module")
def traced(model, backend, collector) -> Iterator[SimpleNamespace]:
    config = TracingConfig(endpoint=collector.url, service_name="gateway-under-test")
    tracing = Tracing(config, traces_endpoint(config))
    refusing = SGLangStandIn(incremental=True)
    refusing.script = lambda body: Script(refuse=503)
    with (
        serve(refusing.app) as refusing_url,
        serve(app := _gateway(model, backend, tracing, refusing_url)) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):
        yield SimpleNamespace(client=client, tracing=tracing, refusing_url=refusing_url, app=app)
    tracing.shutdown()


def _request(traced, path: str, body: dict, headers: dict | None = None) -> httpx.Response:
    r = traced.client.post(path, json=body, headers=headers or {})
    assert r.status_code == 200, r.text
    assert traced.tracing.flush()
    return r


def _only(spans: list[dict], **match) -> dict:
    found = [s for s in spans if all(s[k] == v for k, v in match.items())]
    assert len(found) == 1, (match, [s["name"] for s in spans])
    return found[0]


def test_a_chat_request_is_one_trace_under_the_callers_span_with_its_stages(traced, collector, backend):
    body = {"model": MODEL, "messages": USER, "tools": [WEATHER], "max_tokens": 40, "temperature": 0.5}
    r = _request(traced, "/v1/chat/completions", body, {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
    spans = collector.trace(CLIENT_TRACE)
    server = _only(spans, kind=ProtoSpan.SPAN_KIND_SERVER)
    assert server["name"] == "POST /v1/chat/completions" and server["parent"] == CLIENT_SPAN
    assert server["service"] == "gateway-under-test"
    answer = r.json()
    assert server["attributes"] == server["attributes"] | {
        "http.request.method": "POST",
        "http.route": "/v1/chat/completions",
        "http.response.status_code": 200,
        "gateway.request_id": r.headers["x-request-id"],
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": MODEL,
        "gen_ai.request.max_tokens": 40,
        "gen_ai.request.temperature": 0.5,
        "gen_ai.response.id": answer["id"],
        "gen_ai.response.finish_reasons": ["stop"],
        "gen_ai.usage.input_tokens": answer["usage"]["prompt_tokens"],
        "gen_ai.usage.output_tokens": answer["usage"]["completion_tokens"],
    }
    children = {s["name"]: s for s in spans if s["parent"] == server["id"]}
    assert set(children) == {"gateway.render", "gateway.grammar", "gateway.admission", f"chat {MODEL}", "gateway.parse"}
    call = children[f"chat {MODEL}"]
    port = int(backend.url.rsplit(":", 1)[1])
    assert call["kind"] == ProtoSpan.SPAN_KIND_CLIENT and "first_token" in call["events"]
    assert call["attributes"] == call["attributes"] | {
        "gen_ai.provider.name": "sglang",
        "server.address": "127.0.0.1",
        "server.port": port,
        "gen_ai.usage.output_tokens": backend.n_ids,
        "gen_ai.response.finish_reasons": ["stop"],
    }
    assert call["attributes"]["gen_ai.latency.time_to_first_token"] > 0
    assert backend.server.headers[-1]["traceparent"] == f"00-{CLIENT_TRACE}-{call['id']}-01"
    assert children["gateway.parse"]["attributes"]["gateway.parse.steps"] >= 1
    assert all(server["start"] <= s["start"] <= s["end"] <= server["end"] for s in children.values())


def test_a_failover_is_an_event_of_the_backend_span_which_names_the_replica_that_answered(traced, collector, backend):
    calls = []
    for trace in ("5bf92f3577b34da6a3ce929d0e0e4731", "5bf92f3577b34da6a3ce929d0e0e4732"):  # the replicas take turns
        body = {"model": TWO_REPLICAS, "messages": USER, "max_tokens": 4}
        _request(traced, "/v1/chat/completions", body, {"traceparent": f"00-{trace}-{CLIENT_SPAN}-01"})
        calls.append(_only(collector.trace(trace), name=f"chat {TWO_REPLICAS}"))
    events = sorted(call["events"].count("dispatch") for call in calls)
    assert events == [1, 2]  # one went straight to the backend, the other met the refusing replica first
    moved = next(call for call in calls if "failover" in call["events"])
    assert [e for e in moved["events"] if e in ("dispatch", "failover")] == ["dispatch", "failover", "dispatch"]
    assert moved["attributes"]["server.port"] == int(backend.url.rsplit(":", 1)[1])


def test_the_other_doors_take_the_same_path_and_a_new_trace_reaches_the_backend(traced, collector, backend):
    for path, body, operation in (
        ("/v1/responses", {"model": MODEL, "input": "Hi", "stream": True}, "chat"),
        ("/v1/messages", {"model": MODEL, "max_tokens": 30, "messages": USER}, "chat"),
        ("/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 30}, "text_completion"),
    ):
        before = len(collector.spans)
        _request(traced, path, body)
        spans = collector.spans[before:]
        server = _only(spans, kind=ProtoSpan.SPAN_KIND_SERVER)
        assert server["name"] == f"POST {path}" and server["parent"] == ""
        assert server["attributes"]["gen_ai.operation.name"] == operation
        call = _only(spans, kind=ProtoSpan.SPAN_KIND_CLIENT)
        assert call["parent"] == server["id"] and call["trace"] == server["trace"]
        forwarded = backend.server.headers[-1]["traceparent"]  # the SDK's flags: sampled, and (level 2) random
        assert forwarded.startswith(f"00-{server['trace']}-{call['id']}-") and int(forwarded[-2:], 16) & 1
        assert {"gateway.render", "gateway.parse"} <= {s["name"] for s in spans}


def test_a_refused_request_is_a_span_with_its_error_and_no_backend_call(traced, collector):
    before = len(collector.spans)
    r = traced.client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "max_tokens": 10**6})
    assert r.status_code == 400
    assert traced.tracing.flush()
    spans = collector.spans[before:]
    server = _only(spans, kind=ProtoSpan.SPAN_KIND_SERVER)
    assert server["attributes"]["http.response.status_code"] == 400 and not server["error"]
    render = _only(spans, name="gateway.render")
    assert render["error"] and render["parent"] == server["id"]
    assert not [s for s in spans if s["kind"] == ProtoSpan.SPAN_KIND_CLIENT]


def test_without_tracing_nothing_is_sent_and_the_traceparent_is_forwarded_as_it_came(
    model, backend, collector, monkeypatch
):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    assert start_tracing(TracingConfig()) is None
    posts = collector.posts
    traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    with serve(_gateway(model, backend, None)) as base:
        r = httpx.post(
            f"{base}/v1/chat/completions", json={"model": MODEL, "messages": USER}, headers={"traceparent": traceparent}
        )
    assert r.status_code == 200
    assert backend.server.headers[-1]["traceparent"] == traceparent  # forwarded as it came
    assert collector.posts == posts


def test_the_endpoint_comes_from_the_config_or_the_standard_variables():
    base = "http://collector:4318"
    assert traces_endpoint(TracingConfig(), {}) is None
    assert traces_endpoint(TracingConfig(endpoint=base + "/"), {}) == base + "/v1/traces"
    assert traces_endpoint(TracingConfig(endpoint=base + "/v1/traces"), {}) == base + "/v1/traces"
    assert traces_endpoint(TracingConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": base}) == base + "/v1/traces"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x"}
    assert traces_endpoint(TracingConfig(), env) == "http://t:1/x"
    assert traces_endpoint(TracingConfig(endpoint="http://cli:1"), env) == "http://cli:1/v1/traces"
    assert traces_endpoint(TracingConfig(), {**env, "OTEL_TRACES_EXPORTER": "none"}) is None
    assert traces_endpoint(TracingConfig(endpoint=base), {"OTEL_SDK_DISABLED": "true"}) is None


def test_the_tracing_key_of_the_config_file(tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "models: [{id: m, backend: {type: none}}]\ntracing: {endpoint: 'http://c:4318', sample_ratio: 0.25}\n"
    )
    assert load_config(path).tracing == TracingConfig(endpoint="http://c:4318", sample_ratio=0.25)
    for bad in ("{sample_ratio: 2}", "{endpoint: c:4318}", "{exporter: grpc}"):
        path.write_text(f"models: [{{id: m, backend: {{type: none}}}}]\ntracing: {bad}\n")
        with pytest.raises(ConfigError, match="tracing"):
            load_config(path)


def test_a_collector_that_is_down_fails_no_request_and_is_logged_once(model, backend, caplog):
    config = TracingConfig(endpoint=dead_url())
    tracing = Tracing(config, traces_endpoint(config), export_timeout_s=0.2)
    try:
        with serve(_gateway(model, backend, tracing)) as base, httpx.Client(base_url=base, timeout=30) as client:
            with caplog.at_level(logging.WARNING):
                for _ in range(2):
                    r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER})
                    assert r.status_code == 200
                    tracing.flush()
            counted = samples(client)
    finally:
        tracing.shutdown()
    assert value(counted, "gateway:trace_export_failures_total", unit="batches") == 2
    assert value(counted, "gateway:trace_export_failures_total", unit="spans") >= 2 * 5
    # the start-up line ("spans go to ...") is INFO and reaches caplog whenever an earlier test raised logging to INFO
    ours = [r for r in caplog.records if r.name == "gateway.observability.otlp" and r.levelno >= logging.WARNING]
    assert len(ours) == 1 and "could not export" in ours[0].getMessage()


def test_a_collector_that_never_answers_holds_the_exit_only_briefly(monkeypatch, caplog):
    """A black-holed collector (a NetworkPolicy that drops, a hung proxy): the queued spans are given up."""
    monkeypatch.setattr(otlp, "SHUTDOWN_TIMEOUT_S", 0.2)
    with socket.create_server(("127.0.0.1", 0)) as hole:  # connections queue in its backlog, never answered
        config = TracingConfig(endpoint=f"http://127.0.0.1:{hole.getsockname()[1]}")
        tracing = Tracing(config, traces_endpoint(config), export_timeout_s=600)
        with tracing.tracer.start_as_current_span("last request"):
            pass
        with caplog.at_level(logging.WARNING, logger="gateway.observability.otlp"):
            tracing.shutdown()
    assert "the spans still queued were not sent" in caplog.text


def test_a_collector_that_never_answers_holds_a_bounded_queue_and_the_drops_are_counted(monkeypatch):
    """Spans keep ending while a black-holed collector holds the export: the queue stays at its bound, the spans
    past it are dropped and gateway:trace_spans_dropped_total says how many."""
    monkeypatch.setattr(otlp, "SHUTDOWN_TIMEOUT_S", 0.2)
    with socket.create_server(("127.0.0.1", 0)) as hole:
        config = TracingConfig(endpoint=f"http://127.0.0.1:{hole.getsockname()[1]}")
        tracing = Tracing(config, traces_endpoint(config), export_timeout_s=600)
        bound = tracing.processor._batch_processor._max_queue_size
        for _ in range(2 * bound):
            with tracing.tracer.start_as_current_span("request"):
                pass
        queued = len(tracing.processor._batch_processor._queue)
        (dropped,) = [s.value for m in tracing.collector().collect() for s in m.samples if "dropped" in s.name]
        tracing.shutdown()
    assert queued == bound and dropped == tracing.processor.dropped >= bound - 512  # one batch may be out


def test_a_tenants_request_shows_its_admission_and_fair_queue_wait(model, backend, collector, tmp_path):
    key = "sk-tracing-0123456789abcdef"
    (tmp_path / "t.yaml").write_text(
        f"tenant: acme\nkeys: [{{id: k, sha256: {hashlib.sha256(key.encode()).hexdigest()}}}]\nmodels: ['{MODEL}']\n"
    )
    entry = ModelEntry(id=MODEL, max_running=1, backend=BackendConfig(type="none"))
    gate = policy_gate(tmp_path, None, tmp_path / "audit", GatewayConfig(models=[entry]))
    config = TracingConfig(endpoint=collector.url)
    tracing = Tracing(config, traces_endpoint(config))
    router = Router(lambda u: SGLangBackend(u, incremental=True), urls=[backend.url], policy=RoutingPolicy())
    app = create_app(ModelRegistry([dataclasses.replace(model, backend=router)]), gate=gate, tracing=tracing)
    try:
        with serve(app) as base:
            body = {"model": MODEL, "messages": USER, "stream": True}
            r = httpx.post(f"{base}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"})
            assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
        assert tracing.flush()
    finally:
        tracing.shutdown()
    server = next(s for s in collector.spans if s["attributes"].get("gateway.request_id") == r.headers["x-request-id"])
    assert server["attributes"]["gateway.tenant"] == "acme"
    spans = collector.trace(server["trace"])
    assert _only(spans, name="gateway.admission")["parent"] == server["id"]
    queue, call = _only(spans, name="gateway.queue"), _only(spans, kind=ProtoSpan.SPAN_KIND_CLIENT)
    assert queue["parent"] == server["id"] and queue["end"] <= call["start"]


def test_a_sampled_out_request_sends_no_spans_but_its_trace_context_and_a_sampled_caller_is_followed(
    model, backend, collector
):
    config = TracingConfig(endpoint=collector.url, sample_ratio=0.0)
    tracing = Tracing(config, traces_endpoint(config))
    body = {"model": MODEL, "messages": USER}
    caller = "0af7651916cd43dd8448eb211c80319c"
    try:
        with serve(_gateway(model, backend, tracing)) as base, httpx.Client(base_url=base, timeout=30) as client:
            before = len(collector.spans)
            assert client.post("/v1/chat/completions", json=body).status_code == 200
            assert tracing.flush() and len(collector.spans) == before
            version, trace_id, _, flags = backend.server.headers[-1]["traceparent"].split("-")
            assert version == "00" and len(trace_id) == 32 and not int(flags, 16) & 1
            headers = {"traceparent": f"00-{caller}-{CLIENT_SPAN}-01"}
            assert client.post("/v1/chat/completions", json=body, headers=headers).status_code == 200
            assert tracing.flush()
    finally:
        tracing.shutdown()
    assert _only(collector.trace(caller), kind=ProtoSpan.SPAN_KIND_SERVER)["parent"] == CLIENT_SPAN


def test_the_cli_flag_and_a_missing_sdk_are_clear(monkeypatch, capsys):
    parser = build_parser()
    assert parser.parse_args(["serve", "--otlp-endpoint", "http://c:4318"]).otlp_endpoint == "http://c:4318"
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--otlp-endpoint", "c:4318"])
    assert "not an http:// or https:// URL" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "gateway.observability.otlp", None)  # as if the SDK were not installed
    with pytest.raises(TracingUnavailable, match="pip install opentelemetry-sdk"):
        start_tracing(TracingConfig(endpoint="http://c:4318"))


@pytest.mark.parametrize(
    ("flags", "scheme", "client"),
    [
        ([], "https", ("203.0.113.7", 0)),  # today's default: the peer 127.0.0.1 is a trusted proxy
        (["--no-proxy-headers"], "http", ("127.0.0.1", 50000)),
        (["--forwarded-allow-ips", "10.0.0.0/8,fd00::1"], "http", ("127.0.0.1", 50000)),  # an untrusted peer
    ],
)
def test_the_proxy_header_flags_decide_the_spans_scheme_and_the_client_address(
    traced, collector, flags, scheme, client
):
    """A request from 127.0.0.1 carrying X-Forwarded-Proto / X-Forwarded-For, through the gateway's own uvicorn
    configuration and HTTP protocol (in memory: the peer is 127.0.0.1) into the traced gateway."""
    config = uvicorn_config(traced.app, build_parser().parse_args(["serve", *flags]), ServerLimits())
    config.load()
    trace_id = hashlib.sha256(repr(flags).encode()).hexdigest()[:32]
    request = (
        f"GET /v1/models HTTP/1.1\r\nHost: x\r\ntraceparent: 00-{trace_id}-{CLIENT_SPAN}-01\r\n"
        "X-Forwarded-Proto: https\r\nX-Forwarded-For: 203.0.113.7\r\nConnection: close\r\n\r\n"
    ).encode()
    protocol, written = asyncio.run(
        serve_connection(config.http_protocol_class, config, uvicorn.server.ServerState(), request)
    )
    assert written.startswith(b"HTTP/1.1 200"), written[:200]
    assert traced.tracing.flush()
    assert _only(collector.trace(trace_id), kind=ProtoSpan.SPAN_KIND_SERVER)["attributes"]["url.scheme"] == scheme
    assert protocol.scope["client"] == client


def test_the_proxy_header_flags_reach_uvicorn(capsys):
    parser = build_parser()
    on = uvicorn_config(
        None, parser.parse_args(["serve", "--forwarded-allow-ips", "10.1.2.3, 10.0.0.0/8"]), ServerLimits()
    )
    assert on.proxy_headers and on.forwarded_allow_ips == "10.1.2.3, 10.0.0.0/8"
    assert (
        uvicorn_config(
            None, parser.parse_args(["serve", "--forwarded-allow-ips", "*"]), ServerLimits()
        ).forwarded_allow_ips
        == "*"
    )
    off = uvicorn_config(
        None, parser.parse_args(["serve", "--no-proxy-headers", "--drain-timeout", "7"]), ServerLimits()
    )
    assert not off.proxy_headers and off.timeout_graceful_shutdown == 7
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--forwarded-allow-ips", "10.0.0.1,proxy.local"])
    assert "'proxy.local' is not an IP address or network" in capsys.readouterr().err
    assert main(["serve", "--no-proxy-headers", "--forwarded-allow-ips", "10.0.0.1"]) == 2
    assert "--forwarded-allow-ips needs --proxy-headers" in capsys.readouterr().err
