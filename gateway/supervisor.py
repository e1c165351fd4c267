"""Run the bundled torch worker as a child process and wait until it serves."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1


@dataclass
class WorkerSpec:
    """How to start one bundled worker."""

    checkpoint: Path | None = None
    threads: int | None = None
    device: str | None = None
    max_batch: int | None = None
    weights_dtype: str | None = None

    def argv(self) -> list[str]:
        args = [sys.executable, "-m", "backends.worker", "--host", "127.0.0.1", "--port", "0"]
        for flag, value in (
            ("--model", self.checkpoint),
            ("--threads", self.threads),
            ("--device", self.device),
            ("--max-batch", self.max_batch),
            ("--weights-dtype", self.weights_dtype),
        ):
            if value is not None:
                args += [flag, str(value)]
        return args


class WorkerProcess:
    """A started worker: its URL, and a clean stop that leaves no orphan."""

    def __init__(self, spec: WorkerSpec, startup_timeout: float = 600.0):
        self._proc = subprocess.Popen(
            spec.argv(),
            stdout=subprocess.PIPE,
            stderr=None,  # progress lines go straight to the terminal
            text=True,
            preexec_fn=_die_with_parent,
            cwd=Path(__file__).resolve().parent.parent,
        )
        self.port = self._wait_ready(startup_timeout)
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._drain_stdout, daemon=True).start()

    def _wait_ready(self, timeout: float) -> int:
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

    def alive(self) -> bool:
        return self._proc.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds."""
        if self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(grace)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the parent dies, so a killed gateway leaves no worker behind."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    os.setpgrp()  # Ctrl-C on the terminal reaches the gateway only; it stops the worker itself
