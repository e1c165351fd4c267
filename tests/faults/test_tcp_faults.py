"""Faults on the wire: the gateway app (served in this process with its own HTTP protocol and client timeouts) in
front of a fault backend process through a TCP fault proxy (tcp_proxy.py), and hostile clients on raw sockets.

Each backend case has a model of its own (no test meets another's circuit breaker), health checked once only, so
only requests tell. After every test no backend stream is left open and nothing runs (`/metrics`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from backends.client_timeouts import client_timeout_protocol
from tests.faults.conftest import (
    SETTLE_S,
    Deployment,
    FaultBackend,
    assert_error_response,
    assert_error_then_done,
    chat,
    gateway_in_process,
    open_sockets,
    port_of_url,
    replicas,
    sse,
    start,
    text_of,
)
from tests.faults.fault_backend import REPLY
from tests.faults.tcp_proxy import TcpFaultProxy
from tests.gateway.http_server import small_send_buffers

CLIENT_TIMEOUT_S = 0.5
"""The gateway's header, body and send timeouts here."""
DEADLINE_S = 1.0
CASES = ["stalled", "cut", "not-http", "stale", "endless-body"]
FAILOVER = "failover"
"""Three replicas: one about to refuse connections, one about to reset inside its answer's head, one healthy."""
SILENT = "silent"
"""Two replicas: one about to take requests and never answer, one healthy; a short head timeout."""
AFTER_OUTPUT = "after-output"
"""Two replicas: one about to break after its first events, one healthy."""
NOT_READING = "not-reading"
"""Its stream runs until the client's window is full (a deadline would end it first)."""
TRICKLED = "trickled"
"""Its answers come a byte per write (no short deadline: on a loaded host that takes a while)."""


@pytest.fixture(scope="module")
def wire(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FaultBackend, TcpFaultProxy]]:
    backend = FaultBackend(smollm2)
    try:
        start(backend)
        with TcpFaultProxy(backend.port) as proxy:
            yield backend, proxy
    finally:
        backend.stop()


@dataclass
class FailingReplicas:
    """Proxies to the wire's backend, each a replica that fails the way its test sets (all pass at first)."""

    refusing: TcpFaultProxy
    resetting: TcpFaultProxy
    silent: TcpFaultProxy


@pytest.fixture(scope="module")
def failing(wire: tuple[FaultBackend, TcpFaultProxy]) -> Iterator[FailingReplicas]:
    with ExitStack() as stack:
        yield FailingReplicas(*(stack.enter_context(TcpFaultProxy(wire[0].port)) for _ in range(3)))


@pytest.fixture(scope="module")
def deployment(
    wire: tuple[FaultBackend, TcpFaultProxy],
    failing: FailingReplicas,
    smollm2: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    backend, proxy = wire
    models = [
        replicas(case, smollm2, [proxy.url_for("http")], request_timeout_s=DEADLINE_S, health_interval_s=60)
        for case in CASES
    ]
    models += [
        replicas(case, smollm2, [proxy.url_for("http")], health_interval_s=60) for case in (NOT_READING, TRICKLED)
    ]
    healthy = backend.url
    models += [
        replicas(FAILOVER, smollm2, [failing.refusing.url_for("http"), failing.resetting.url_for("http"), healthy]),
        replicas(SILENT, smollm2, [failing.silent.url_for("http"), healthy], head_timeout_s=0.2),
        replicas(AFTER_OUTPUT, smollm2, [failing.resetting.url_for("http"), healthy]),
    ]
    for model in models[-3:]:
        model["backend"]["health_interval_s"] = 60  # checked once, at the start, while every replica passes
    protocol = small_send_buffers(client_timeout_protocol(CLIENT_TIMEOUT_S, send_timeout_s=CLIENT_TIMEOUT_S))
    with gateway_in_process(models, tmp_path_factory.mktemp("wire"), http=protocol, max_body_bytes=100_000) as (url, _):
        yield Deployment(os.getpid(), port_of_url(url), models, [backend], in_process=True)


@pytest.fixture
def client(deployment: Deployment) -> Iterator[httpx.Client]:
    """A client of the gateway; after the test, no backend stream is open and nothing runs. (The sockets are not
    counted as conftest's `no_leaks` does: the proxy's, in this process too, live as long as the gateway's pooled
    connections through it.)"""
    with deployment.client() as c:
        yield c
        settled_by = time.monotonic() + SETTLE_S
        while (problems := deployment.stream_problems()) or not nothing_runs(c):
            assert time.monotonic() < settled_by, (problems, c.get("/metrics").text)
            time.sleep(0.05)


@pytest.fixture
def proxy(wire: tuple[FaultBackend, TcpFaultProxy]) -> Iterator[TcpFaultProxy]:
    """The proxy, passing again after the test; the backend serving well."""
    backend, proxy = wire
    try:
        yield proxy
    finally:
        proxy.set("pass")
        backend.set()


def response_head_bytes(backend: FaultBackend) -> int:
    """How long the backend's answer head is (the bytes a stall `after` them lets through)."""
    body = json.dumps({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 1}, "stream": True, "rid": "h"})
    with socket.create_connection(("127.0.0.1", backend.port), timeout=10) as s:
        s.sendall(f"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
        seen = b""
        while b"\r\n\r\n" not in seen:
            seen += s.recv(4096)
    return seen.index(b"\r\n\r\n") + 4


def nothing_runs(client: httpx.Client) -> bool:
    """No generation and no backend request in flight, as /metrics says."""
    lines = client.get("/metrics").text.splitlines()
    running = [line for line in lines if "requests_running{" in line]
    return bool(running) and all(line.endswith(" 0.0") for line in running)


def test_a_backend_that_sends_its_head_then_stalls_runs_into_the_deadline(client, wire, proxy):
    proxy.set("stall", after=response_head_bytes(wire[0]))
    for stream in (True, False):
        assert_error_response(client.post("/v1/chat/completions", json=chat("stalled", stream=stream)), 504, "timeout")


def failovers(client: httpx.Client, model: str) -> dict[str, float]:
    """gateway:backend_retries_total of `model` by replica, from /metrics."""
    found = {}
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("gateway:backend_retries_total{") and f'model_name="{model}"' in line:
            found[line.split('replica="', 1)[1].split('"', 1)[0]] = float(line.rsplit(" ", 1)[1])
    return found


def assert_replies(response: httpx.Response) -> None:
    """A whole answer (streamed or not) with the fault backend's reply."""
    assert response.status_code == 200, response.text
    streamed = response.headers["content-type"].startswith("text/event-stream")
    text = text_of(list(sse(response))) if streamed else response.json()["choices"][0]["message"]["content"]
    assert text and REPLY.startswith(text), text


def answered(lines: list[logging.LogRecord], model: str) -> list[dict[str, object]]:
    """The access lines of `model`'s chat requests among `lines`."""
    parsed = [json.loads(r.getMessage()) for r in lines if r.name == "gateway.access" and r.levelno == logging.INFO]
    return [line for line in parsed if line["model"] == model and line["path"] == "/v1/chat/completions"]


def test_replicas_that_refuse_or_reset_before_any_output_are_failed_over(client, wire, failing, caplog):
    """One replica refuses connections, one resets inside its answer's head, one serves: every request succeeds,
    each failed replica is tried (its failovers counted), and the access line names the replica that answered."""
    failing.refusing.stop()  # it passed its health check; now its port refuses connections
    failing.resetting.set("cut", after=12, rst=True)  # `HTTP/1.1 200`, then an RST
    refusing, resetting = failing.refusing.url_for("http"), failing.resetting.url_for("http")
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        for i in range(6):
            assert_replies(client.post("/v1/chat/completions", json=chat(FAILOVER, stream=i % 2 == 0)))
    moved = failovers(client, FAILOVER)
    assert moved.get(refusing, 0) >= 1 and moved.get(resetting, 0) >= 1, moved
    lines = answered(caplog.records, FAILOVER)
    assert len(lines) == 6 and {line["replica"] for line in lines} == {wire[0].url}, lines
    assert {r for line in lines for r in line.get("failed_over", ())} == {refusing, resetting}, lines


def test_a_replica_that_takes_requests_and_never_answers_is_failed_over(client, failing):
    failing.silent.set("blackhole")
    for stream in (True, False):  # one of the two goes to the silent replica first
        assert_replies(client.post("/v1/chat/completions", json=chat(SILENT, stream=stream)))
    assert list(failovers(client, SILENT)) == [failing.silent.url_for("http")]


def test_a_replica_that_breaks_after_output_is_not_failed_over(client, wire, failing):
    failing.resetting.set("cut", after=response_head_bytes(wire[0]) + 300)  # a few events in
    outcomes = set()
    for _ in range(2):  # one on each replica
        with client.stream("POST", "/v1/chat/completions", json=chat(AFTER_OUTPUT, stream=True)) as response:
            assert response.status_code == 200, response.read()
            events = list(sse(response))
        assert text_of(events) and REPLY.startswith(text_of(events)), events
        if any(isinstance(e, dict) and "error" in e for e in events):
            assert_error_then_done(events, "backend_error")  # the text so far, the error, never a second try
            outcomes.add("error")
        else:
            outcomes.add("whole")
    assert outcomes == {"error", "whole"} and failovers(client, AFTER_OUTPUT) == {}


def test_a_backend_cut_inside_a_frame_is_an_error_event_after_text(client, wire, proxy):
    proxy.set("cut", after=response_head_bytes(wire[0]) + 300)  # a few events in, mid-line
    with client.stream("POST", "/v1/chat/completions", json=chat("cut", stream=True)) as response:
        assert response.status_code == 200, response.read()
        events = list(sse(response))
    assert REPLY.startswith(text_of(events)) and text_of(events)
    assert_error_then_done(events, "backend_error")


def test_an_answer_that_is_not_http_fails_at_once_not_at_the_deadline(client, proxy):
    proxy.set("corrupt", after=0)  # no blank line ever ends this head: it used to wait for the deadline
    responses = [client.post("/v1/chat/completions", json=chat("not-http", stream=stream)) for stream in (True, False)]
    for response in responses:
        assert_error_response(response, 503, "backend_unavailable")
    assert "not HTTP" in responses[0].json()["error"]["message"]  # (the second may meet the circuit it opened)


def test_keep_alive_connections_the_backend_closed_are_not_a_failure(client, proxy):
    for stream in (False, True, False):  # the pool holds connections from these
        assert client.post("/v1/chat/completions", json=chat("stale", stream=stream)).status_code == 200
    before = proxy.accepted
    proxy.stale()  # each closes when the next request arrives on it, unanswered
    for stream in (False, True):
        response = client.post("/v1/chat/completions", json=chat("stale", stream=stream))
        assert response.status_code == 200, response.text
    assert proxy.stale_hits >= 1 and proxy.accepted > before  # met a closed connection, answered on a fresh one


def test_an_answer_that_comes_a_byte_at_a_time_is_read_whole(client, proxy):
    """Every line, chunk header and event cut at every byte (the head's too): the same reply, streamed and not."""
    proxy.set("trickle")
    for stream in (True, False):
        response = client.post("/v1/chat/completions", json=chat(TRICKLED, stream=stream))
        assert response.status_code == 200, response.text
        text = text_of(list(sse(response))) if stream else response.json()["choices"][0]["message"]["content"]
        assert text and REPLY.startswith(text), text


def test_a_chunked_body_that_never_ends_still_answers(client, wire, proxy):
    client.post("/v1/chat/completions", json=chat("endless-body", stream=False))
    whole = max(link.from_upstream for link in proxy.links)  # the answer's bytes, its last chunk's `0\r\n\r\n` too
    proxy.set("stall", after=whole - 5)
    for stream in (False, True):
        response = client.post("/v1/chat/completions", json=chat("endless-body", stream=stream))
        assert response.status_code == 200 and "shade" in response.text, response.text


def test_a_client_that_stops_reading_is_cut_and_frees_its_requests(client, deployment, wire):
    backend = wire[0]
    backend.set(mode="endless")
    body = json.dumps(chat(NOT_READING, stream=True, max_tokens=8000, n=4, logprobs=True, top_logprobs=20))
    with socket.socket() as reader:
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.connect(("127.0.0.1", deployment.port))
        reader.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        assert reader.recv(16).startswith(b"HTTP/1.1 200")  # then it reads nothing more: 4 choices, 8000 tokens each
        own_port = reader.getsockname()[1]
        cut_by = time.monotonic() + SETTLE_S
        while any(s.local_port == deployment.port and s.remote_port == own_port for s in open_sockets(os.getpid())[0]):
            assert time.monotonic() < cut_by, "the gateway holds the connection of a client that stopped reading"
            time.sleep(0.05)
    # and (the `client` fixture checks) its backend streams are closed, nothing runs


@pytest.mark.parametrize(
    "head, sent",
    [
        (b"Content-Length: 1000", b'{"model": '),
        (b"Transfer-Encoding: chunked", b'9\r\n{"model":\r\n'),
    ],
    ids=["content-length", "chunked"],
)
def test_a_body_that_stops_coming_is_a_408_and_closes_the_connection(client, deployment, head, sent):
    before, left = chat_requests(client, "408"), chat_requests(client, "499")
    with socket.create_connection(("127.0.0.1", deployment.port), timeout=30) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n\r\n" + sent)
        answer = s.makefile("rb").read()  # cut by the gateway at the body timeout: a 408, then closed
        assert answer.startswith(b"HTTP/1.1 408 ") and b"connection: close" in answer, answer
    # a new connection: `client`'s pooled one has idled the header timeout too, and the gateway closing it as it is
    # reused is a reset (the 408's FIN comes at once, before that close has reached the client)
    with deployment.client() as fresh:
        counted_by = time.monotonic() + SETTLE_S
        while chat_requests(fresh, "408") == before:  # counted as the 408 it was answered ...
            assert time.monotonic() < counted_by, fresh.get("/metrics").text
            time.sleep(0.05)
        assert chat_requests(fresh, "499") == left and chat_requests(fresh, "500") == 0  # ... not as a client that
        # left, nor as a crash


def chat_requests(client: httpx.Client, status: str) -> float:
    """Chat completions answered with `status` so far, as /metrics counts them."""
    label = f'route="/v1/chat/completions",status="{status}"'
    lines = client.get("/metrics").text.splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith("gateway:requests_total") and label in line)


def test_deeply_nested_json_is_a_400(client):
    depth = 40_000  # within the byte limit; orjson refuses past 1024 levels
    response = client.post(
        "/v1/chat/completions", content=b"[" * depth + b"]" * depth, headers={"content-type": "application/json"}
    )
    assert_error_response(response, 400, "invalid_json")


def test_a_chunked_body_past_the_byte_limit_is_a_413(client):
    def chunks() -> Iterator[bytes]:
        for _ in range(30):
            yield b" " * 10_000  # httpx sends a generator chunked

    response = client.post("/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"})
    assert_error_response(response, 413, "request_too_large")
