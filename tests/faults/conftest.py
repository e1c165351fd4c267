"""Real processes for the fault tests, helpers to talk to them, and the check that nothing leaked.

Processes: the bundled worker (`python -m backends.worker`) and fault backends (fault_backend.py),
each on a port picked beforehand, printing `READY <port>`, run through gateway/process/supervisor.py's
WorkerProcess; and `gateway serve --config` over them (tests/e2e's GatewayProcess), which can start
alongside them.

Leaks: once a test's clients are gone, a gateway holds its listening socket, keep-alive connections
to replicas that are alive, and the sockets it had before (its event loop's self-pipe); nothing
else. Every stream it opened on a fault backend is closed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from starlette.types import ASGIApp

from backends.checkpoint import load_checkpoint, write_hf_metadata
from gateway.process.supervisor import WorkerProcess, WorkerSpec
from tests.e2e.conftest import free_port, pid_alive

STARTUP_S = 120.0
SETTLE_S = 10.0
"""Upper bound for the gateway to let go of what a finished request held; never a speed check."""
WAIT_S = 30.0
"""Client timeout: a gateway that hangs fails the test instead of stalling the suite."""
USER = [{"role": "user", "content": "Tell me a long story about a fox."}]
DONE = "[DONE]"
ERROR_FIELDS = {"message", "type", "param", "code"}
POOL_PER_CLIENT = 3
"""Keep-alive connections one backend client (a model's client for one replica) may keep when a
test's requests run one after another: at most that many ran at once, a generation, the abort of
the generation before it, and a health check."""


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded SmolLM2's tokenizer and config as a Hugging Face directory (no weights): the same tokens, for
    the gateway models and fault backends that need only a tokenizer, read as a directory checkpoint is."""
    path = tmp_path_factory.mktemp("smollm2")
    write_hf_metadata(load_checkpoint(), path)
    return path


@dataclass
class PortSpec(WorkerSpec):
    """The bundled worker on a port picked beforehand, so a gateway config can name it before it
    serves (argparse keeps the last `--port` given)."""

    port: int = field(default_factory=free_port)

    def argv(self) -> list[str]:
        return [*super().argv(), "--port", str(self.port)]


@dataclass
class FaultSpec(PortSpec):
    """How to start a fault backend, serving well until told otherwise (of WorkerSpec's fields only
    `checkpoint` applies)."""

    def argv(self) -> list[str]:
        args = [sys.executable, "-m", "tests.faults.fault_backend", "--port", str(self.port)]
        return args + (["--checkpoint", str(self.checkpoint)] if self.checkpoint else [])


class BackendProcess(WorkerProcess):
    """A backend process starting on `spec.port`: its URL is known at once; `start()` waits until it serves."""

    def __init__(self, spec: PortSpec):
        super().__init__(spec)
        self.port = spec.port
        self.url = f"http://127.0.0.1:{spec.port}"


class FaultBackend(BackendProcess):
    """A fault backend process: `set()` changes how it fails, `stats()` says what it saw."""

    def __init__(self, checkpoint: Path):
        super().__init__(FaultSpec(checkpoint=checkpoint))

    def set(self, **fault: Any) -> dict[str, Any]:
        """Replace the fault (mode, after, delay, healthy; see fault_backend.Fault; none: all is well);
        the new state and the counts."""
        response = httpx.post(f"{self.url}/fault", json=fault, timeout=WAIT_S)
        response.raise_for_status()
        return response.json()

    def stats(self) -> dict[str, Any]:
        """The fault, `generate_requests` received so far and `open_streams` now."""
        return httpx.get(f"{self.url}/fault", timeout=WAIT_S).json()


def real_worker() -> BackendProcess:
    """The bundled worker on the embedded SmolLM2, as small as it goes."""
    return BackendProcess(PortSpec(threads=1, max_batch=4, context_length=1024))


def start(*processes: BackendProcess) -> None:
    """Wait until every process (already starting, side by side) serves."""
    for process in processes:
        assert process.wait_ready(STARTUP_S) == process.url


def port_of_url(url: str) -> int:
    """The port of a `http://host:port` URL."""
    return int(url.rsplit(":", 1)[1])


def alive(process: BackendProcess) -> bool:
    """Whether the process runs (a zombie does not)."""
    return pid_alive(process.pid)


def kill(process: BackendProcess) -> None:
    """SIGKILL: the process dies at once, its connections with it."""
    os.kill(process.pid, signal.SIGKILL)
    process.stop()  # reaps it


def replicas(model_id: str, checkpoint: Path, urls: list[str], **backend: Any) -> dict[str, Any]:
    """A config entry serving `model_id` (SmolLM2's tokenizer, from `checkpoint`) from SGLang-dialect replicas."""
    return {
        "id": model_id,
        "family": "hermes",
        "checkpoint": str(checkpoint),
        "backend": {"type": "sglang", "incremental": True, "urls": urls, **backend},
    }


def write_config(path: Path, models: list[dict[str, Any]]) -> Path:
    """A gateway config file (gateway/process/config.py) serving `models`."""
    path.write_text(yaml.safe_dump({"models": models}))
    return path


@contextmanager
def gateway_in_process(
    models: list[dict[str, Any]], directory: Path, wrap: Callable[[ASGIApp], Any] = lambda app: app, **options: Any
) -> Iterator[tuple[str, Any]]:
    """The gateway app serving `models` (config entries, written to `directory`), wrapped by `wrap`, served in this
    process over real HTTP (uvicorn's `http` protocol in `options`, the rest create_app's) once every router started:
    its base URL and the wrapped app."""
    from gateway.app import create_app
    from gateway.process.config import load_config
    from gateway.process.launch import start_models
    from tests.gateway.http_server import serve

    http = options.pop("http", "auto")
    config = load_config(write_config(directory / "gateway.yaml", models))
    with ExitStack() as stack:
        app = wrap(create_app(start_models(config, stack), **options))
        with serve(app, http=http) as url:
            httpx.get(f"{url}/ready", timeout=WAIT_S)  # starts every router, and so its health loop
            yield url, app


def chat(model: str, *, stream: bool, max_tokens: int = 16, **fields: Any) -> dict[str, Any]:
    """A chat request body (greedy, short)."""
    return {"model": model, "messages": USER, "stream": stream, "max_tokens": max_tokens, "temperature": 0, **fields}


def assert_serves(client: httpx.Client, model: str) -> None:
    """`model` answers a request (again) within SETTLE_S: the faults before left nothing broken."""
    settled_by = time.monotonic() + SETTLE_S
    while (response := client.post("/v1/chat/completions", json=chat(model, stream=False))).status_code != 200:
        assert time.monotonic() < settled_by, (response.status_code, response.text)
        time.sleep(0.2)
    assert response.json()["choices"][0]["message"]["content"], response.text


def sse(response: httpx.Response) -> Iterator[dict[str, Any] | str]:
    """A streamed response's events as they arrive: JSON objects, and DONE; any other line fails."""
    for line in response.iter_lines():
        if line:
            assert line.startswith("data: "), line
            data = line.removeprefix("data: ")
            yield DONE if data == DONE else json.loads(data)


def stream_until_text(response: httpx.Response) -> tuple[list[dict[str, Any] | str], Iterator[dict[str, Any] | str]]:
    """The events up to the first one with text, and an iterator of the rest."""
    assert response.status_code == 200, response.read()
    events = sse(response)
    seen = []
    for event in events:
        seen.append(event)
        if text_of(seen):
            return seen, events
    raise AssertionError(f"the stream ended before any text: {seen}")


def text_of(events: list[dict[str, Any] | str]) -> str:
    """The content the chunks carry."""
    return "".join(
        choice["delta"].get("content") or "" for e in events if isinstance(e, dict) for choice in e.get("choices", [])
    )


def assert_error_then_done(events: list[dict[str, Any] | str], code: str) -> dict[str, Any]:
    """The stream ended with one OpenAI error event (`code`) and [DONE], and never finished normally."""
    assert events[-1] == DONE and DONE not in events[:-1], events[-3:]
    error = events[-2]
    assert isinstance(error, dict) and set(error) == {"error"}, events[-3:]
    assert set(error["error"]) == ERROR_FIELDS and error["error"]["code"] == code, error
    assert error["error"]["type"] == "server_error", error
    assert not any(c.get("finish_reason") for e in events[:-2] for c in e["choices"]), events
    return error["error"]


def assert_error_response(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """An HTTP error with OpenAI's body: {"error": {message, type, param, code}}."""
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_FIELDS, body
    assert body["error"]["code"] == code and body["error"]["message"], body
    return body["error"]


# --- leaks -------------------------------------------------------------------------------------------

_TCP_STATES = {"01": "ESTABLISHED", "08": "CLOSE_WAIT", "0A": "LISTEN"}


@dataclass(frozen=True)
class TcpSocket:
    """One TCP socket a process holds (`state` as the kernel names it; others as its hex code)."""

    local_port: int
    remote_port: int
    state: str


def open_sockets(pid: int) -> tuple[list[TcpSocket], int]:
    """The TCP sockets `pid` holds open, and how many other sockets (Unix ones, self-pipes) it holds."""
    fd_dir = Path(f"/proc/{pid}/fd")
    inodes = set()
    for fd in os.listdir(fd_dir):
        try:
            link = os.readlink(fd_dir / fd)
        except FileNotFoundError:  # closed while we looked
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:[") : -1])
    tcp: dict[str, TcpSocket] = {}
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            _, local, remote, state, *_, inode = row.split()[:10]
            if inode in inodes:
                tcp[inode] = TcpSocket(
                    int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16), _TCP_STATES.get(state, state)
                )
    return list(tcp.values()), len(inodes - tcp.keys())


class Deployment:
    """A gateway (process `pid`, or the test process itself when `in_process`) serving `models`
    (config entries) from backend processes."""

    def __init__(
        self,
        pid: int,
        port: int,
        models: list[dict[str, Any]],
        backends: list[BackendProcess],
        in_process: bool = False,
    ):
        self.pid = pid
        self.port = port
        self.backends = backends
        self.in_process = in_process
        self.clients = Counter(port_of_url(url) for m in models for url in m["backend"]["urls"])
        """Backend clients per replica port: one per model it serves."""
        looks = []
        for _ in range(5):  # a socket being connected is in no table for a moment: the least of a few looks
            looks.append(open_sockets(pid)[1])
            time.sleep(0.1)
        self.other_sockets = min(looks)
        """Non-TCP sockets it holds idle: its event loop's self-pipe."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> httpx.Client:
        """A client of the gateway that waits WAIT_S at most."""
        return httpx.Client(base_url=self.base_url, timeout=WAIT_S)

    def socket_problems(self) -> list[str]:
        """What the gateway holds beyond its listener and keep-alive connections to live replicas."""
        live = {b.port for b in self.backends if alive(b)}
        dead = {b.port for b in self.backends} - live
        tcp, other = open_sockets(self.pid)
        problems = []
        pools: Counter[int] = Counter()
        for s in tcp:
            if s.local_port == self.port:
                if s.state != "LISTEN":
                    problems.append(f"a client connection is still open: {s}")
            elif s.remote_port in live:
                pools[s.remote_port] += 1  # ESTABLISHED, or CLOSE_WAIT once the replica dropped it idle
            elif s.remote_port in dead:
                problems.append(f"a connection to a dead replica is still open: {s}")
            elif not self.in_process:  # in the test process, other sockets are the tests' own
                problems.append(f"a socket nobody accounts for: {s}")
        problems += [
            f"{n} pool connections to replica :{port}"
            for port, n in pools.items()
            if n > POOL_PER_CLIENT * self.clients[port]
        ]
        if not self.in_process and other != self.other_sockets:
            problems.append(f"{other} non-TCP sockets, {self.other_sockets} before")
        return problems

    def stream_problems(self) -> list[str]:
        """Backend streams the gateway left open."""
        return [
            f"{b.url} has {n} streams open"
            for b in self.backends
            if isinstance(b, FaultBackend) and alive(b) and (n := b.stats()["open_streams"])
        ]

    def problems(self) -> list[str]:
        """Everything left over now."""
        return self.socket_problems() + self.stream_problems()

    def assert_no_leaks(self) -> None:
        """Within SETTLE_S, nothing is left over."""
        settled_by = time.monotonic() + SETTLE_S
        while (problems := self.problems()) and time.monotonic() < settled_by:
            time.sleep(0.1)
        assert not problems, problems


@pytest.fixture
def no_leaks(deployment: Deployment) -> Iterator[None]:
    """After the test (and its client), nothing is left over: see Deployment.assert_no_leaks."""
    yield
    deployment.assert_no_leaks()


@pytest.fixture
def client(deployment: Deployment, no_leaks: None) -> Iterator[httpx.Client]:
    """A client of the module's gateway, closed before the leak check."""
    with deployment.client() as c:
        yield c
