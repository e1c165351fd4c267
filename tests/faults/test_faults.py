"""Faults behind a real `gateway serve`: killed, refusing, slow, broken and missing replicas.

One gateway process serves many models, each a router over real backend processes (the bundled
worker, fault backends), one model per test case so that no test meets another's circuit breakers.
After every test the gateway holds no socket it should not (see conftest.Deployment) and no
backend stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import NO_GRAMMAR_WARMUP, GatewayProcess, free_port
from tests.faults.conftest import (
    DONE,
    BackendProcess,
    Deployment,
    FaultBackend,
    assert_error_response,
    assert_error_then_done,
    assert_serves,
    chat,
    kill,
    real_worker,
    replicas,
    sse,
    start,
    stream_until_text,
    text_of,
    write_config,
)
from tests.faults.fault_backend import REPLY

WORKER = "worker"
"""The bundled worker, alone."""
BROKEN = ["malformed", "wrong_shape", "truncated"]
SOLO_CASES = [
    *(("after", mode) for mode in BROKEN),
    *(("before", mode, stream) for mode in BROKEN for stream in (True, False)),
    ("slow",),
    ("bad_id",),
    ("circuit",),
    ("successes",),
    ("throttled",),
]
"""Each case has a model of its own over the solo backend, alone, with a 1 s deadline."""
RETRIED = [("refuse503", 0), ("refuse429", 0), ("truncated", 0), ("malformed", 0), ("wrong_shape", 0), ("bad_id", 0)]
"""Failures before the first token that another replica makes good: each has a model of its own
over the failing backend, then the solo one, health checked once only (so only requests tell)."""
KILL_PAIR = "kill-pair"
"""The victim, then the solo backend; health checked once only."""
DOWN = "down"
"""Two ports nothing listens on."""


def solo(*case: object) -> str:
    """The model of one of SOLO_CASES."""
    return "solo-" + "-".join(map(str, case)).lower()


def retried(mode: str, after: int) -> str:
    """The model of one of RETRIED."""
    return f"retried-{mode}-{after}"


@dataclass
class Backends:
    """The module's backend processes: the bundled worker, and fault backends for each role."""

    worker: BackendProcess
    solo: FaultBackend
    failing: FaultBackend
    victim: FaultBackend

    def all(self) -> list[BackendProcess]:
        return [self.worker, self.solo, self.failing, self.victim]


@pytest.fixture(scope="module")
def backends(smollm2: Path) -> Iterator[Backends]:
    """The backend processes, starting; `deployment` waits until they serve."""
    processes = Backends(real_worker(), FaultBackend(smollm2), FaultBackend(smollm2), FaultBackend(smollm2))
    try:
        yield processes
    finally:
        for process in processes.all():
            process.stop()


@pytest.fixture(scope="module")
def deployment(backends: Backends, smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    b = backends
    models = [
        replicas(WORKER, smollm2, [b.worker.url], health_interval_s=0.5),
        *(replicas(solo(*case), smollm2, [b.solo.url], request_timeout_s=1.0) for case in SOLO_CASES),
        *(replicas(retried(*case), smollm2, [b.failing.url, b.solo.url], health_interval_s=60) for case in RETRIED),
        replicas(KILL_PAIR, smollm2, [b.victim.url, b.solo.url], health_interval_s=60),
        replicas(DOWN, smollm2, [f"http://127.0.0.1:{free_port()}" for _ in range(2)], health_interval_s=0.5),
    ]
    config = write_config(tmp_path_factory.mktemp("faults") / "gateway.yaml", models)
    gateway = GatewayProcess(NO_GRAMMAR_WARMUP, config=config, ready_path="/health")  # DOWN's replicas never come up
    try:
        start(*b.all())
        yield Deployment(gateway.proc.pid, gateway.port, models, b.all())
    finally:
        gateway.stop()


def recover(client: httpx.Client, backend: FaultBackend, model: str) -> None:
    """Once the replica is well again, `model` serves again."""
    backend.set()
    assert_serves(client, model)


def assert_retry_after(response: httpx.Response) -> None:
    """The answer says when to try again: Retry-After in whole seconds, at least one."""
    value = response.headers.get("retry-after", "")
    assert value.isdigit() and int(value) >= 1, response.headers


def test_worker_killed_mid_stream_ends_the_stream_at_once(client, backends):
    """The dropped connection ends the stream (`backend_error`), not the stall timeout (`backend_stalled`) nor the
    end of the 400 tokens asked for: no wall clock needed."""
    body = chat(WORKER, stream=True, max_tokens=400, ignore_eos=True)
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        seen, rest = stream_until_text(response)
        kill(backends.worker)
        seen += rest
    assert_error_then_done(seen, "backend_error")
    # its only replica is gone: the model is unavailable, not broken
    response = client.post("/v1/chat/completions", json=chat(WORKER, stream=False))
    assert_error_response(response, 503, "backend_unavailable")
    assert_retry_after(response)


def test_replica_killed_mid_stream_then_the_other_serves(client, backends):
    victim, other = backends.victim, backends.solo
    victim.set(delay=0.05)  # keeps the stream going for about two seconds
    other.set(mode="refuse503")  # so the stream lands on the victim (tried first, or retried there)
    with client.stream("POST", "/v1/chat/completions", json=chat(KILL_PAIR, stream=True, max_tokens=64)) as response:
        seen, rest = stream_until_text(response)
        assert victim.stats()["open_streams"] == 1
        other.set()
        kill(victim)
        seen += rest
    assert_error_then_done(seen, "backend_error")
    # the dead replica refuses connections: every request succeeds on the other one
    before = other.stats()["generate_requests"]
    for stream in (False, True, False, True):
        response = client.post("/v1/chat/completions", json=chat(KILL_PAIR, stream=stream))
        assert response.status_code == 200, response.text
        if stream:
            events = list(sse(response))
            assert events[-1] == DONE and events[-2]["choices"][0]["finish_reason"] == "length", events[-2:]
    assert other.stats()["generate_requests"] == before + 4


@pytest.mark.parametrize("mode, after", RETRIED)
def test_failure_before_the_first_token_is_retried_on_another_replica(client, backends, mode, after):
    model, failing, other = retried(mode, after), backends.failing, backends.solo
    failing.set(mode=mode, after=after)
    other.set()
    failed_before = failing.stats()["generate_requests"]
    served_before = other.stats()["generate_requests"]
    for stream in (False, True, False, True):
        response = client.post("/v1/chat/completions", json=chat(model, stream=stream))
        assert response.status_code == 200, response.text
        text = text_of(list(sse(response))) if stream else response.json()["choices"][0]["message"]["content"]
        assert text and REPLY.startswith(text), text
    assert failing.stats()["generate_requests"] > failed_before, "the failing replica was never tried"
    assert other.stats()["generate_requests"] == served_before + 4
    retries = f'gateway:backend_retries_total{{model_name="{model}",replica="{failing.url}"}}'
    assert any(line.startswith(retries) for line in client.get("/metrics").text.splitlines()), "no failover counted"


@pytest.mark.parametrize("mode", BROKEN)
def test_broken_stream_after_output_is_an_error_event(client, backends, mode):
    model = solo("after", mode)
    backends.solo.set(mode=mode, after=2)
    with client.stream("POST", "/v1/chat/completions", json=chat(model, stream=True)) as response:
        assert response.status_code == 200, response.read()
        events = list(sse(response))
    text = text_of(events)
    assert text and REPLY.startswith(text), events
    assert_error_then_done(events, "backend_error")
    recover(client, backends.solo, model)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize(
    "mode, status, code, says",
    [
        ("malformed", 502, "backend_error", "backend sent invalid JSON in its stream"),
        ("wrong_shape", 502, "backend_error", "backend sent meta_info that is not an object"),
        ("truncated", 503, "backend_unavailable", "no backend replica"),  # retryable, and no other replica to take it
    ],
)
def test_broken_stream_before_output_is_a_clean_error(client, backends, mode, status, code, says, stream):
    """With its one replica broken, the answer says what was wrong; only the retryable failure asks for a retry."""
    model = solo("before", mode, stream)
    backends.solo.set(mode=mode, after=0)
    response = client.post("/v1/chat/completions", json=chat(model, stream=stream))
    assert assert_error_response(response, status, code)["message"].startswith(says)
    if status == 503:
        assert_retry_after(response)
    else:
        assert "retry-after" not in response.headers
    recover(client, backends.solo, model)


def test_slow_replica_runs_into_the_deadline(client, backends):
    model = solo("slow")
    backends.solo.set(mode="slow", after=0)
    for stream in (True, False):
        response = client.post("/v1/chat/completions", json=chat(model, stream=stream))
        assert_error_response(response, 504, "timeout")
    backends.solo.set(mode="slow", after=2)  # after the first token the deadline ends the stream
    with client.stream("POST", "/v1/chat/completions", json=chat(model, stream=True)) as response:
        seen, rest = stream_until_text(response)
        seen += rest
    assert_error_then_done(seen, "timeout")
    recover(client, backends.solo, model)


@pytest.mark.parametrize("token", [-1, 10**6, 2**40])
def test_a_token_id_outside_the_vocabulary_is_a_502(client, backends, token):
    """Before any output a 502 (with no other replica to move to), after some an error event: never a 500 from the
    detokenizer, nor a token dropped."""
    model = solo("bad_id")
    backends.solo.set(mode="bad_id", after=0, token=token)
    assert_error_response(client.post("/v1/chat/completions", json=chat(model, stream=False)), 502, "backend_error")
    backends.solo.set(mode="bad_id", after=2, token=token, delay=0.02)  # the first tokens come apart from it
    with client.stream("POST", "/v1/chat/completions", json=chat(model, stream=True)) as response:
        events = list(sse(response))
    assert text_of(events) and "outside the vocabulary" in assert_error_then_done(events, "backend_error")["message"]
    recover(client, backends.solo, model)


def test_refusing_replica_opens_its_circuit(client, backends):
    model = solo("circuit")
    backends.solo.set(mode="refuse503")
    for _ in range(10):
        asked = backends.solo.stats()["generate_requests"]
        response = client.post("/v1/chat/completions", json=chat(model, stream=False))
        assert_error_response(response, 503, "backend_unavailable")
        assert_retry_after(response)
        if backends.solo.stats()["generate_requests"] == asked:
            break  # the circuit is open: the gateway answered without asking the replica
    else:
        raise AssertionError("ten refusals in a row and the circuit never opened")
    recover(client, backends.solo, model)  # its half-open trial succeeds


def test_successes_between_failures_keep_the_circuit_closed(client, backends):
    model = solo("successes")
    for _ in range(4):
        backends.solo.set(mode="refuse503")
        asked = backends.solo.stats()["generate_requests"]
        response = client.post("/v1/chat/completions", json=chat(model, stream=False))
        assert_error_response(response, 503, "backend_unavailable")
        assert backends.solo.stats()["generate_requests"] == asked + 1, "the circuit opened"
        backends.solo.set()
        response = client.post("/v1/chat/completions", json=chat(model, stream=False))
        assert response.status_code == 200, response.text


def test_throttling_replica_never_opens_its_circuit(client, backends):
    model = solo("throttled")
    backends.solo.set(mode="refuse429")
    for _ in range(5):
        asked = backends.solo.stats()["generate_requests"]
        response = client.post("/v1/chat/completions", json=chat(model, stream=False))
        assert assert_error_response(response, 429, "rate_limit_exceeded")["type"] == "requests"
        assert_retry_after(response)
        assert backends.solo.stats()["generate_requests"] == asked + 1, "429s opened the circuit"
    recover(client, backends.solo, model)


def test_all_replicas_down_is_a_503_with_retry_after(client):
    for stream in (False, True):
        response = client.post("/v1/chat/completions", json=chat(DOWN, stream=stream))
        assert_error_response(response, 503, "backend_unavailable")
        assert_retry_after(response)
    ready = client.get("/ready")  # the other models still serve: the pod stays in its Service
    assert ready.status_code == 200 and ready.json()["models"][DOWN] is False, ready.text
