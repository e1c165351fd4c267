"""GET /metrics over real HTTP: a gateway with a Router over a dead replica and an SGLang stand-in."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from backends.router import Router, RoutingPolicy
from backends.sglang import SGLangBackend
from gateway.app import create_app
from gateway.models.registry import ModelRegistry, served_model_from_checkpoint
from gateway.observability.metrics import OVERHEAD_BUCKETS, TenantLabels, _Tally
from gateway.process.config import GatewayConfig
from gateway.process.policy_gate import policy_gate
from policies.auth import hash_key
from tests.dashboard import exposed_families, queried_metrics
from tests.gateway.http_server import dead_url, serve
from tests.gateway.sglang_standin import Script, SGLangStandIn
from tests.gateway.test_app import MODEL, USER

ROOT = Path(__file__).resolve().parents[2]

TOKENS = "Sunny and warm today."


def samples(client: httpx.Client) -> dict[tuple[str, frozenset], float]:
    """Every sample of /metrics by (name, labels)."""
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(all_samples, name: str, **labels) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    wanted = set(labels.items())
    found = [v for (n, ls), v in all_samples.items() if n == name and wanted <= ls]
    assert found, f"no sample {name} {labels}"
    return sum(found)


@pytest.fixture(scope="module")
def gateway(checkpoint):
    model = served_model_from_checkpoint(MODEL, checkpoint, "hermes", None)
    server = SGLangStandIn(incremental=True)
    ids = model.encoder.encode_plain(TOKENS) + [2]
    # A request whose max_tokens is 999 holds after two tokens until its client goes away; 998 fails after two.
    server.script = lambda body: Script(
        ids=ids,
        hold_after=2 if body["sampling_params"]["max_new_tokens"] == 999 else None,
        error_after=2 if body["sampling_params"]["max_new_tokens"] == 998 else None,
    )
    refuser = SGLangStandIn(incremental=True)
    refuser.script = lambda body: Script(refuse=503)
    with serve(server.app) as url, serve(refuser.app) as refusing:
        dead = dead_url()
        urls = [dead, url, refusing]  # the first pick of the lightest healthy ones is the refusing one
        router = Router(lambda u: SGLangBackend(u, incremental=True), urls=urls, policy=RoutingPolicy())
        app = create_app(ModelRegistry([dataclasses.replace(model, backend=router)]))
        with serve(app) as base:
            yield SimpleNamespace(
                client=httpx.Client(base_url=base, timeout=30),
                dead=dead,
                live=url,
                refusing=refusing,
                n_ids=len(ids),
                server=server,
            )


def test_a_generation_feeds_the_request_latency_token_and_replica_metrics(gateway, caplog):
    client, dead, live, refusing, n_ids = gateway.client, gateway.dead, gateway.live, gateway.refusing, gateway.n_ids
    before = samples(client)
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        for stream in (False, True):
            r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "stream": stream})
            assert r.status_code == 200
    after = samples(client)

    def grew(name, **labels):
        return value(after, name, **labels) - (
            value(before, name, **labels) if any(n == name and set(labels.items()) <= ls for n, ls in before) else 0
        )

    labels = {"model_name": MODEL}
    assert grew("gateway:requests_total", route="/v1/chat/completions", status="200", tenant="none", **labels) == 2
    assert grew("gateway:request_success_total", finished_reason="stop", **labels) == 2
    for histogram in (
        "time_to_first_token_seconds",
        "e2e_request_latency_seconds",
        "overhead_seconds",
        "time_per_output_token_seconds",
    ):
        assert grew(f"gateway:{histogram}_count", **labels) == 2, histogram
    assert grew("gateway:generation_tokens_total", **labels) == 2 * n_ids
    assert grew("gateway:prompt_tokens_total", **labels) > 0
    # The dead replica fails its health check; the refusing one passes it, answers 503 and the request moves on.
    assert value(after, "gateway:backend_requests_running", replica=live, **labels) == 0
    assert value(after, "gateway:backend_healthy", replica=live, **labels) == 1
    assert value(after, "gateway:backend_healthy", replica=dead, **labels) == 0
    assert value(after, "gateway:backend_circuit_breaker_state", replica=live, **labels) == 0
    retries = value(after, "gateway:backend_retries_total", replica=refusing, **labels)
    errors = value(after, "gateway:backend_errors_total", replica=refusing, status="503", **labels)
    assert retries == errors >= 1
    assert value(after, "gateway:num_requests_running", **labels) == 0

    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"]
    chats = [line for line in lines if line["route"] == "/v1/chat/completions"]
    assert len(chats) == 2
    for line in chats:
        assert line["status"] == 200 and line["model"] == MODEL and line["replica"] == live
        assert line["completion_tokens"] == n_ids and line["prompt_tokens"] > 0
        assert line["finish_reasons"] == ["stop"] and 0 < line["ttft_ms"] <= line["latency_ms"]
        assert len(line["request_id"]) == 32


def test_a_held_stream_counts_as_running_until_its_client_leaves(gateway):
    client, live = gateway.client, gateway.live
    body = {"model": MODEL, "messages": USER, "stream": True, "max_tokens": 999}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        first = next(lines)
        during = samples(client)
        assert value(during, "gateway:num_requests_running", model_name=MODEL) == 1, (first, list(lines))
        tasks_during = value(during, "gateway:event_loop_tasks")
        assert value(during, "gateway:backend_requests_running", model_name=MODEL, replica=live) == 1
    for _ in range(100):  # the gateway notices the hang-up when it next writes or polls: wait for it, bounded
        after = samples(client)  # (the request's task ends a moment after the running count drops)
        if value(after, "gateway:num_requests_running", model_name=MODEL) == 0 and (
            value(after, "gateway:event_loop_tasks") < tasks_during
        ):
            break
        time.sleep(0.05)
    assert value(after, "gateway:num_requests_running", model_name=MODEL) == 0
    assert value(after, "gateway:backend_requests_running", model_name=MODEL, replica=live) == 0
    assert 0 < value(after, "gateway:event_loop_tasks") < tasks_during  # the held stream's tasks are gone


def test_errors_and_shielded_spellings_are_counted(gateway):
    client = gateway.client
    r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "temperature": "hot"})
    assert r.status_code == 400
    r = client.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "say <|im_start|> and <|im_end|>"}]},
    )
    assert r.status_code == 200
    after = samples(client)
    assert value(after, "gateway:requests_total", status="400", route="/v1/chat/completions", model_name="none") >= 1
    assert value(after, "gateway:shielded_spellings_total", model_name=MODEL) == 2
    r = client.get("/no/such/path")
    assert r.status_code == 404
    assert value(samples(client), "gateway:requests_total", route="other", status="404") == 1


def test_access_lines_say_how_an_answer_failed_or_was_cut_short(gateway, caplog):
    """A refusal names its error; a stream's 200 says nothing of how it ended, its line does."""
    client = gateway.client
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        refused = client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "temperature": "hot"})
        body = {"model": MODEL, "messages": USER, "stream": True}
        failed = client.post("/v1/chat/completions", json={**body, "max_tokens": 998})
        with client.stream("POST", "/v1/chat/completions", json={**body, "max_tokens": 999}) as held:
            next(held.iter_lines())

        def lines() -> list[dict]:
            return [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"]

        for _ in range(100):  # the gateway notices the hang-up when it next polls: wait for its line, bounded
            if len(lines()) == 3:
                break
            time.sleep(0.05)
    error_event = json.loads(failed.text.split("data: ")[-2])["error"]
    assert (refused.status_code, failed.status_code, held.status_code) == (400, 200, 200)
    assert [(line["status"], line.get("error"), line.get("client_closed")) for line in lines()] == [
        (400, refused.json()["error"]["code"] or refused.json()["error"]["type"], None),
        (200, error_event["code"], None),
        (200, None, True),
    ]


def test_top_level_fields_a_door_ignores_are_named_in_the_access_line_and_counted(gateway, caplog):
    """Undeclared top-level fields are ignored, as vLLM ignores them (OpenAI's API refuses them), but no longer
    silently: the access line names them (the first 8, cut to 64 characters) and
    `gateway:requests_with_ignored_fields_total` counts their requests by route; declared fields are not named."""
    client = gateway.client
    sent = [
        ("/v1/chat/completions", {"model": MODEL, "messages": USER, "max_tokens": 1, "prediction": {}, "x_vendor": 1}),
        ("/v1/messages/count_tokens", {"model": MODEL, "messages": USER, "context_management": {}}),
        ("/tokenize", {"model": MODEL, "messages": USER, "return_token_strs": True}),
        ("/tokenize", {"model": MODEL, "prompt": "Hi", **{f"{i:02}" + "k" * 99: i for i in range(20)}}),
    ]
    before = samples(client)
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        for path, body in sent:
            assert client.post(path, json=body).status_code == 200, path
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"][-len(sent) :]
    assert [(line["path"], line.get("ignored_fields")) for line in lines] == [
        ("/v1/chat/completions", ["prediction", "x_vendor"]),
        ("/v1/messages/count_tokens", ["context_management"]),
        ("/tokenize", None),
        ("/tokenize", [f"{i:02}" + "k" * 62 for i in range(8)]),
    ]
    after = samples(client)
    name = "gateway:requests_with_ignored_fields_total"
    for route, count in (("/v1/chat/completions", 1), ("/v1/messages/count_tokens", 1), ("/tokenize", 1)):
        had = value(before, name, route=route) if (name, frozenset({("route", route)})) in before else 0
        assert value(after, name, route=route) - had == count, route


def test_tallies_expose_what_the_library_own_updates_expose():
    """A `_Tally` (the per-request updates without the library's per-call checks) leaves the exposition as the
    library's own `inc` and `observe` do: every bucket edge, between edges, zero, past the last, NaN, infinity."""

    def exposition(update) -> list[str]:
        registry = CollectorRegistry()
        counter = Counter("c", "c", ["m"], registry=registry).labels("x")
        histogram = Histogram("h", "h", ["m"], buckets=OVERHEAD_BUCKETS, registry=registry).labels("x")
        update(counter, histogram)
        return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]

    amounts = [*OVERHEAD_BUCKETS, *(b * 1.5 for b in OVERHEAD_BUCKETS), 0.0, 1e-9, 99.0, float("nan"), float("inf")]

    def library(counter, histogram) -> None:
        for amount in amounts:
            histogram.observe(amount)
        for n in (1, 3, 20):
            counter.inc(n)

    def tallied(counter, histogram) -> None:
        for amount in amounts:
            _Tally(histogram).observe(amount)
        for n in (1, 3, 20):
            _Tally(counter).inc(n)

    assert exposition(tallied) == exposition(library)
    assert 'h_bucket{le="0.0001",m="x"} 3.0' in exposition(library)  # 0.0, 1e-9 and the edge itself


MULTIPROCESS_TALLY = """
import sys
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from gateway.observability.metrics import _Tally
_Tally(Counter("c", "c", ["m"]).labels("x")).inc(3)
_Tally(Histogram("h", "h", ["m"], buckets=(1.0,)).labels("x")).observe(0.5)
registry = CollectorRegistry()
MultiProcessCollector(registry)
sys.stdout.write(generate_latest(registry).decode())
"""


def test_tallies_write_through_the_library_in_its_multiprocess_mode(tmp_path):
    """With PROMETHEUS_MULTIPROC_DIR set, prometheus_client keeps each value in a file: a `_Tally` updates it through
    the child's own `inc` / `observe` (a write to the in-memory float would never reach the file)."""
    done = subprocess.run(
        [sys.executable, "-c", MULTIPROCESS_TALLY],
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert 'c_total{m="x"} 3.0' in lines and 'h_sum{m="x"} 0.5' in lines and 'h_bucket{le="1.0",m="x"} 1.0' in lines


def test_tenant_labels_are_capped():
    labels = TenantLabels(limit=2)
    assert [labels.label(t) for t in ("a", "b", "c", "a", "", "d", "b")] == [
        "a",
        "b",
        "other",
        "a",
        "none",
        "other",
        "b",
    ]


def test_every_gateway_metric_the_dashboard_queries_is_exposed(gateway):
    queried = queried_metrics(("gateway:",))
    assert len(queried) >= 15
    assert queried <= exposed_families(gateway.client.get("/metrics").text)


def test_a_w3c_traceparent_is_forwarded_to_the_backend_and_logged(gateway, caplog):
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    body = {"model": MODEL, "messages": USER}
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        for sent in (trace, "00-not-a-trace-01", None):
            headers = {"traceparent": sent} if sent else {}
            assert gateway.client.post("/v1/chat/completions", json=body, headers=headers).status_code == 200
    forwarded = [h.get("traceparent") for h in gateway.server.headers[-3:]]
    assert forwarded == [trace, None, None]
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"][-3:]
    assert [line.get("trace_id") for line in lines] == ["4bf92f3577b34da6a3ce929d0e0e4736", None, None]


def test_a_policy_file_rejected_at_start_up_shows_in_the_metrics(tmp_path):
    """A broken file at start-up has no last good version: its tenant is absent, and no reload counted it;
    gateway:policy_problems says so until a load accepts it."""
    key = "sk-prometheus"
    (tmp_path / "prometheus.yaml").write_text(
        f"tenant: prometheus\nkeys:\n  - id: p\n    sha256: {hash_key(key)}\nmetrics: true\n"
    )
    broken = tmp_path / "broken.yaml"
    broken.write_text("tenant: broken\nkeys: []\npriority: urgent\n")
    gate = policy_gate(tmp_path, None, tmp_path / "audit.jsonl", GatewayConfig(models=[]))
    app = create_app(ModelRegistry([]), gate=gate)
    with serve(app) as url, httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}) as client:
        assert value(samples(client), "gateway:policy_problems") == 1
        broken.unlink()
        gate.store.reload()
        assert value(samples(client), "gateway:policy_problems") == 0


def test_the_limiter_store_restores_are_exposed(tmp_path):
    """gateway:limiter_store_restores_total reads the limiter's count of re-registrations after the store lost its
    data (tests/policies/test_redis_restart.py makes real ones; here the count is read at each scrape)."""
    key = "sk-prometheus"
    (tmp_path / "prometheus.yaml").write_text(
        f"tenant: prometheus\nkeys:\n  - id: p\n    sha256: {hash_key(key)}\nmetrics: true\n"
    )
    gate = policy_gate(tmp_path, None, None, GatewayConfig(models=[]))
    app = create_app(ModelRegistry([]), gate=gate)
    with serve(app) as url, httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}) as client:
        assert value(samples(client), "gateway:limiter_store_restores_total") == 0
        gate.limiter.restores += 2
        assert value(samples(client), "gateway:limiter_store_restores_total") == 2
