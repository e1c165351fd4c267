"""`gateway serve --workers N`: N gateway processes answering on one listening socket.

The parent binds one listening socket per child on the same port (SO_REUSEPORT: the kernel spreads new
connections evenly over them; a shared socket would hand most of a burst to whichever child wakes first),
starts the bundled workers once (a worker that dies comes back on its port), then starts N children. Each
child runs `gateway serve` with the parent's arguments and learns from the GATEWAY_PROCESS_ROLE environment
variable which inherited socket to accept on, which worker URLs to use and where the group's metrics sockets
are (gateway/observability/process_metrics.py; a restarted child continues its predecessor's counters). The parent keeps the sockets open, so connections that
arrive while a child restarts wait in its socket's queue. SIGTERM / SIGINT and SIGHUP
go to every child (each drains, or reloads its policies, as a single gateway does), and a child still running
past its drain and `exit_after_drain_s` (its settlements, its spans' flush) is killed; a child that dies unasked is
started again; one that dies before it ever served stops the group.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from gateway.observability.tracing import SHUTDOWN_TIMEOUT_S
from gateway.process.supervisor import WorkerSupervisor, die_with_parent
from policies.limits.limiter import STORE_TIMEOUT_S
from policies.limits.settle_backlog import SETTLE_RETRY_DELAYS_S, first_tries_s

log = logging.getLogger(__name__)

ROLE_ENV = "GATEWAY_PROCESS_ROLE"
POLL_S = 0.2
RESTART_PAUSE_S = 1.0
EXIT_MARGIN_S = 1.0


def exit_after_drain_s(store_timeout_s: float | None = None) -> float:
    """The longest a gateway process takes to exit once its drain is over: the settlements its limits store missed,
    tried again after each of SETTLE_RETRY_DELAYS_S (each try waits for a turn and its call, `store_timeout_s` each),
    then the spans still queued (SHUTDOWN_TIMEOUT_S), then a margin to exit."""
    backlog_s = first_tries_s(SETTLE_RETRY_DELAYS_S, store_timeout_s or STORE_TIMEOUT_S)
    return backlog_s + SHUTDOWN_TIMEOUT_S + EXIT_MARGIN_S


@dataclass
class ProcessRole:
    """What the parent tells one child."""

    index: int
    count: int
    fd: int
    """The inherited listening socket."""
    runtime_dir: str
    """The group's private directory (metrics sockets)."""
    worker_urls: dict[str, str]
    """Model id → URL of the bundled worker the parent started for it."""

    def metrics_socket(self, index: int | None = None) -> Path:
        return Path(self.runtime_dir) / f"process-{self.index if index is None else index}.sock"

    def sibling_sockets(self) -> list[Path]:
        return [self.metrics_socket(i) for i in range(self.count) if i != self.index]

    @property
    def lines_lock(self) -> Path:
        """The lock the group's processes take turns on to write a line past PIPE_BUF (whole_lines.py)."""
        return Path(self.runtime_dir) / "lines.lock"

    def listening_socket(self) -> socket.socket:
        return socket.socket(fileno=self.fd)


def process_role() -> ProcessRole | None:
    """This process's role in a group, or None for a gateway on its own (or the group's parent)."""
    raw = os.environ.get(ROLE_ENV)
    return ProcessRole(**json.loads(raw)) if raw else None


def listen(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` listening sockets on one port (the first one picks it when `port` is 0), inheritable by children.
    A port something already listens on is refused (EADDRINUSE), as a single gateway's is: SO_REUSEPORT alone would
    let a second group, a stale one, say, share it silently and take half of the connections."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if port:
        with socket.socket(family, socket.SOCK_STREAM) as probe:  # without SO_REUSEPORT: fails beside a listener
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose protocol says TCP (accepted ones
            # inherit it)
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, sockets[0].getsockname()[1] if len(sockets) > 1 else port))
            sock.listen(2048)
            sock.set_inheritable(True)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class ProcessGroup:
    """The parent: starts, watches, restarts and signals the children."""

    def __init__(
        self, argv: Sequence[str], sockets: list[socket.socket], worker_urls: dict[str, str], stop_after_s: float
    ):
        self._argv = list(argv)
        self._sockets = sockets
        self._dir = tempfile.mkdtemp(prefix="gateway-")
        count = len(sockets)
        self._roles = [ProcessRole(i, count, s.fileno(), self._dir, worker_urls) for i, s in enumerate(sockets)]
        self._stop_after_s = stop_after_s
        self.children: list[subprocess.Popen[bytes]] = []
        self._served = [False] * count
        self._stopping = False
        self._failed = False

    def _start(self, role: ProcessRole) -> subprocess.Popen[bytes]:
        role.metrics_socket().unlink(missing_ok=True)  # its appearance says that this child has started serving
        env = {**os.environ, ROLE_ENV: json.dumps(asdict(role))}
        return subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", *self._argv],
            env=env,
            pass_fds=(role.fd,),
            preexec_fn=die_with_parent,  # noqa: PLW1509 - it only makes two system calls
        )

    def _signal_all(self, sig: int) -> None:
        for child in self.children:
            if child.poll() is None:
                child.send_signal(sig)

    def _stop(self) -> None:
        self._stopping = True
        self._signal_all(signal.SIGTERM)  # a second one: the children stop without waiting
        # The children's copies are then the last: when each closes its listener after the drain delay, new
        # connections are refused (as by a single gateway) instead of waiting unanswered in a queue nobody reads.
        for sock in self._sockets:
            sock.close()

    async def run(self, supervisors: Sequence[WorkerSupervisor]) -> int:
        """Until stopped: 0 after a stop, 1 when a child failed before it served."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop)
        loop.add_signal_handler(signal.SIGHUP, self._signal_all, signal.SIGHUP)
        watchers = [asyncio.create_task(s.watch(lambda url: None)) for s in supervisors]
        self.children = [self._start(role) for role in self._roles]
        print(
            f"gateway: {len(self.children)} processes (pids {', '.join(str(c.pid) for c in self.children)}) on "
            f"{self._sockets[0].getsockname()}; their metrics sockets are in {self._dir}",
            file=sys.stderr,
            flush=True,
        )
        try:
            await self._watch()
            await self._wait_stopped()
        finally:
            for task in watchers:
                task.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
            for sock in self._sockets:
                sock.close()
            shutil.rmtree(self._dir, ignore_errors=True)  # the metrics sockets and counters files
        return 1 if self._failed else 0

    async def _watch(self) -> None:
        while not self._stopping:
            await asyncio.sleep(POLL_S)
            for i, child in enumerate(self.children):
                self._served[i] = self._served[i] or self._roles[i].metrics_socket().exists()
                code = child.poll()
                if code is None or self._stopping:
                    continue
                if not self._served[i]:
                    log.error(
                        "gateway process %d (pid %d) exited with %s before it served; stopping", i, child.pid, code
                    )
                    self._failed = True
                    self._stop()
                    return
                log.error("gateway process %d (pid %d) exited with %s; starting a new one", i, child.pid, code)
                await asyncio.sleep(RESTART_PAUSE_S)
                if self._stopping:  # stopped during the pause: a new child would miss the SIGTERM and serve on
                    return
                self._served[i] = False
                self.children[i] = self._start(self._roles[i])

    async def _wait_stopped(self) -> None:
        """Every child has drained and exited, or is killed after `stop_after_s` (its drain and its exit after it)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._stop_after_s
        while any(c.poll() is None for c in self.children):
            if loop.time() > deadline:
                for child in self.children:
                    if child.poll() is None:
                        log.error("gateway process pid %d did not stop in time; killed", child.pid)
                        child.kill()
                        child.wait()
            await asyncio.sleep(POLL_S)
