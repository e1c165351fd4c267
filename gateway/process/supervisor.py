"""Run the bundled torch worker as a child process, wait until it serves, and restart it if it dies."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL("libc.so.6", use_errno=True) if sys.platform.startswith("linux") else None
"""Loaded here, in the parent: the child between fork and exec must not import or load anything."""


@dataclass
class WorkerOptions:
    """The bundled worker's settings (None: the worker's own default); each is the worker flag of its name."""

    threads: int | None = None
    device: str | None = None
    max_batch: int | None = None
    max_waiting: int | None = None
    weights_dtype: str | None = None
    context_length: int | None = None
    prefix_cache: bool | None = None
    """False: `--no-prefix-cache` (a boolean option is its flag, or `--no-` its flag when False)."""
    cuda_graphs: str | None = None
    """`auto` or `off`: `--cuda-graphs` (decode steps as CUDA graphs with `device: cuda`)."""


@dataclass
class WorkerSpec(WorkerOptions):
    """How to start one bundled worker."""

    checkpoint: Path | None = None

    @classmethod
    def of(cls, checkpoint: Path | None, options: WorkerOptions) -> WorkerSpec:
        """The spec for `checkpoint` with `options` (e.g. a config file's backend section)."""
        return cls(checkpoint=checkpoint, **{f.name: getattr(options, f.name) for f in fields(WorkerOptions)})

    def argv(self) -> list[str]:
        # every grammar the gateway sends was built and compiled under its own budget (or none, as configured): the
        # worker's check would compile it a second time, and refuse one near the budget by noise
        args = [sys.executable, "-m", "backends.worker", "--host", "127.0.0.1", "--port", "0"]
        args += ["--grammar-compile-budget", "0"]
        if self.checkpoint is not None:
            args += ["--model", str(self.checkpoint)]
        for option in fields(WorkerOptions):
            value, flag = getattr(self, option.name), option.name.replace("_", "-")
            if isinstance(value, bool):
                args.append(f"--{flag}" if value else f"--no-{flag}")
            elif value is not None:
                args += [f"--{flag}", str(value)]
        return args


REPO_ROOT = Path(__file__).resolve().parents[2]
"""Where workers start, so that `python -m backends.worker` finds its package without an install."""
WORKER_STOP_GRACE_S = 10.0
"""How long a stopped worker gets between SIGTERM and SIGKILL (the chart's grace period counts it per embedded one)."""


class WorkerProcess:
    """A started worker: `wait_ready()` gives its URL; `stop()` leaves no orphan."""

    def __init__(self, spec: WorkerSpec, port: int | None = None):
        self._proc = subprocess.Popen(
            [*spec.argv(), *(["--port", str(port)] if port else [])],  # argparse keeps the last --port given
            stdout=subprocess.PIPE,
            stderr=None,  # progress lines go straight to the terminal
            text=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - it only makes two system calls
            cwd=REPO_ROOT,
        )
        self.url: str | None = None

    def wait_ready(self, timeout: float = 600.0) -> str:
        """Block until the worker prints `READY <port>`; its base URL."""
        port = self._read_ready_line(timeout)
        self.url = f"http://127.0.0.1:{port}"
        threading.Thread(target=self._drain_stdout, daemon=True).start()
        return self.url

    def _read_ready_line(self, timeout: float) -> int:
        ready: list[int] = []
        done = threading.Event()

        def read() -> None:
            assert self._proc.stdout is not None
            for line in self._proc.stdout:
                if line.startswith("READY "):
                    ready.append(int(line.split()[1]))
                    break
                sys.stderr.write(line)
            done.set()

        threading.Thread(target=read, daemon=True).start()
        if not done.wait(timeout) or not ready:
            if done.is_set():  # its stdout closed: it is exiting, and its exit code says why
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(5)
            self.stop()
            raise RuntimeError(f"worker did not become ready (exit code {self._proc.poll()})")
        return ready[0]

    def _drain_stdout(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            sys.stderr.write(line)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def exit_code(self) -> int | None:
        """None while it runs."""
        return self._proc.poll()

    def stop(self, grace: float = WORKER_STOP_GRACE_S) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds."""
        if self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(grace)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


class WorkerSupervisor:
    """Keeps one bundled worker serving: when it dies unasked, a new one starts (with a growing pause
    between tries)."""

    def __init__(self, spec: WorkerSpec, name: str = "worker"):
        self.spec = spec
        self.name = name
        self.worker: WorkerProcess | None = None
        self._stopping = False
        self._port: int | None = None
        """Where restarted workers listen (None: the spec's port, a free one)."""

    def start(self) -> str:
        """Start the first worker and wait until it serves (blocking); its URL."""
        self.worker = WorkerProcess(self.spec)
        return self.worker.wait_ready()

    def keep_port(self) -> None:
        """Restarted workers listen on the current one's port, so clients in other processes keep its URL."""
        assert self.worker is not None and self.worker.url is not None
        self._port = int(self.worker.url.rsplit(":", 1)[1])

    async def watch(self, on_ready: Callable[[str], None], poll_s: float = 0.5, max_pause_s: float = 30.0) -> None:
        """Until cancelled: restart the worker whenever it has exited; `on_ready` gets each new one's URL."""
        pause = 1.0
        while True:
            await asyncio.sleep(poll_s)
            if self._stopping or self.worker is None or self.worker.exit_code() is None:
                continue
            log.error(
                "%s (pid %d) exited with %s; starting a new one", self.name, self.worker.pid, self.worker.exit_code()
            )
            try:
                self.worker = WorkerProcess(self.spec, self._port)
                url = await asyncio.to_thread(self.worker.wait_ready)
            except (RuntimeError, OSError) as e:
                log.error("%s did not start: %s; next try in %.0f s", self.name, e, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, max_pause_s)
                continue
            pause = 1.0
            log.warning("%s ready again at %s (pid %d)", self.name, url, self.worker.pid)
            on_ready(url)

    def stop(self) -> None:
        """Stop the current worker for good."""
        self._stopping = True
        if self.worker is not None:
            self.worker.stop()


def die_with_parent() -> None:
    """In the child: get SIGTERM when the parent dies, so a killed gateway leaves no worker behind."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    os.setpgrp()  # Ctrl-C on the terminal reaches the gateway only; it stops the worker itself
