"""Graceful drain: SIGTERM to `gateway serve` while a stream is in flight.

The stream finishes normally; /ready answers 503 while the gateway drains (for the `--drain-delay`
it keeps its listener); then new connections are refused while the stream still runs; the gateway
exits 0.
"""

from __future__ import annotations

import signal
import time
from contextlib import ExitStack
from itertools import dropwhile
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import NO_GRAMMAR_WARMUP, GatewayProcess
from tests.faults.conftest import (
    DONE,
    WAIT_S,
    FaultBackend,
    chat,
    replicas,
    start,
    stream_until_text,
    text_of,
    write_config,
)
from tests.faults.fault_backend import REPLY

MODEL = "smollm2"


def readiness_until_refused(base_url: str) -> list[tuple[int, bool | None]]:
    """GET /ready on a new connection each time until one is refused; (status, draining) of each answer.
    A connection the kernel queued just before the listener closed is reset unanswered: refused as well."""
    seen = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{base_url}/ready", timeout=WAIT_S)
        except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
            return seen
        seen.append((response.status_code, response.json().get("draining")))
        time.sleep(0.05)
    raise AssertionError(f"the gateway kept accepting connections: {seen[-3:]}")


def test_sigterm_lets_the_stream_in_flight_finish(smollm2: Path, tmp_path: Path):
    with ExitStack() as stack:
        backend = FaultBackend(smollm2)
        stack.callback(backend.stop)
        model = replicas(MODEL, smollm2, [backend.url], health_interval_s=0.5)
        gateway = GatewayProcess(
            "--drain-delay", "0.5", NO_GRAMMAR_WARMUP, config=write_config(tmp_path / "gateway.yaml", [model])
        )
        stack.callback(gateway.stop)  # it is ready once the backend serves
        start(backend)
        backend.set(delay=0.1)  # the reply streams for about four seconds
        with (
            httpx.Client(base_url=gateway.base_url, timeout=WAIT_S) as client,
            client.stream("POST", "/v1/chat/completions", json=chat(MODEL, stream=True, max_tokens=64)) as response,
        ):
            seen, rest = stream_until_text(response)
            gateway.proc.send_signal(signal.SIGTERM)
            readiness = readiness_until_refused(gateway.base_url)
            # new connections are refused while the gateway still serves the stream
            assert gateway.proc.poll() is None and backend.stats()["open_streams"] == 1
            seen += rest
        draining = list(dropwhile(lambda answer: answer[0] == 200, readiness))  # 200s: before it took the signal
        assert draining and all(answer == (503, True) for answer in draining), readiness
        assert seen[-1] == DONE and seen[-2]["choices"][0]["finish_reason"] == "stop", seen[-3:]
        assert text_of(seen) == REPLY
        assert gateway.proc.wait(WAIT_S) == 0, gateway.stderr()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{gateway.base_url}/health", timeout=WAIT_S)
