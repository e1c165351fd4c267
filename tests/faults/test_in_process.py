"""No stuck tasks: the gateway app, built as `gateway serve` builds it, served in this process over
real HTTP in front of fault backend processes, so that its event loop's tasks can be looked at.

Every fault, whatever the answer, must leave behind no task (beyond the uvicorn server's, the app
lifespan's and the routers' health loops, all there before), no socket and no backend stream.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.e2e.conftest import free_port
from tests.faults.conftest import (
    WAIT_S,
    BackendProcess,
    Deployment,
    FaultBackend,
    assert_error_then_done,
    chat,
    gateway_in_process,
    kill,
    port_of_url,
    replicas,
    start,
    stream_until_text,
)

FAULTS = [
    ("ok", 0),
    ("malformed", 0),
    ("malformed", 2),
    ("wrong_shape", 0),
    ("wrong_shape", 2),
    ("truncated", 0),
    ("truncated", 2),
    ("slow", 0),
    ("slow", 2),
    ("refuse503", 0),
]
"""(mode, tokens before the fault); each on a model of its own (with a 1 s deadline)."""
DOWN = "down"
LEFT = "left"
"""The client leaves in the middle of the stream."""
KILLED = "killed"
"""The only replica, the victim, is killed mid-stream."""


class LoopProbe:
    """The app, remembering the event loop that serves it, so that the loop's tasks can be listed."""

    def __init__(self, app: ASGIApp):
        self.app = app
        self.loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.loop = asyncio.get_running_loop()
        await self.app(scope, receive, send)

    def tasks(self) -> set[asyncio.Task]:
        """The loop's tasks, listed on the loop itself."""

        async def others() -> set[asyncio.Task]:
            return asyncio.all_tasks() - {asyncio.current_task()}

        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(others(), self.loop).result(WAIT_S)


class InProcessDeployment(Deployment):
    """The gateway app served in this process, whose leftovers include tasks."""

    def __init__(self, probe: LoopProbe, port: int, models: list[dict[str, Any]], backends: list[BackendProcess]):
        super().__init__(os.getpid(), port, models, backends, in_process=True)
        self.probe = probe
        self.baseline = probe.tasks()
        """What the server, the app and the routers keep running once they started."""

    def problems(self) -> list[str]:
        """Deployment's, and tasks that were not there at the start."""
        return super().problems() + [f"a task is left over: {t!r}" for t in self.probe.tasks() - self.baseline]


@pytest.fixture(scope="module")
def backends(smollm2: Path) -> Iterator[tuple[FaultBackend, FaultBackend]]:
    """The fault backend, and the victim."""
    processes = (FaultBackend(smollm2), FaultBackend(smollm2))
    try:
        start(*processes)
        yield processes
    finally:
        for process in processes:
            process.stop()


@pytest.fixture(scope="module")
def deployment(
    backends: tuple[FaultBackend, FaultBackend], smollm2: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InProcessDeployment]:
    fault, victim = backends
    models = [
        *(replicas(f"{mode}-{after}", smollm2, [fault.url], request_timeout_s=1.0) for mode, after in FAULTS),
        replicas(LEFT, smollm2, [fault.url]),
        replicas(KILLED, smollm2, [victim.url]),
        replicas(DOWN, smollm2, [f"http://127.0.0.1:{free_port()}"]),
    ]
    with gateway_in_process(models, tmp_path_factory.mktemp("in-process"), LoopProbe) as (url, probe):
        yield InProcessDeployment(probe, port_of_url(url), models, list(backends))


@pytest.mark.parametrize("mode, after", FAULTS)
def test_fault_leaves_nothing_behind(client, backends, mode, after):
    backends[0].set(mode=mode, after=after)
    for stream in (True, False):  # what the answers say, test_faults checks; here: what they leave
        client.post("/v1/chat/completions", json=chat(f"{mode}-{after}", stream=stream))


def test_all_down_leaves_nothing_behind(client):
    for stream in (True, False):
        assert client.post("/v1/chat/completions", json=chat(DOWN, stream=stream)).status_code == 503


def test_client_leaving_mid_stream_leaves_nothing_behind(client, backends):
    backends[0].set(mode="slow", after=2)  # the stream stops after two tokens and holds
    with client.stream("POST", "/v1/chat/completions", json=chat(LEFT, stream=True)) as response:
        _, _held = stream_until_text(response)  # dropping the rest of the stream would close the response
        assert backends[0].stats()["open_streams"] == 1


def test_replica_killed_mid_stream_leaves_nothing_behind(client, backends):
    victim = backends[1]
    victim.set(delay=0.05)
    with client.stream("POST", "/v1/chat/completions", json=chat(KILLED, stream=True, max_tokens=64)) as response:
        seen, rest = stream_until_text(response)
        kill(victim)
        seen += rest
    assert_error_then_done(seen, "backend_error")
