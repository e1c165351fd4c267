"""A real `gateway serve` process (with its bundled worker child) shared by the end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from backends.checkpoint import EMBEDDED_MODEL_ID

ROOT = Path(__file__).resolve().parents[2]
NO_GRAMMAR_WARMUP = "--no-grammar-warmup"
"""For a gateway whose tests are not about grammars (faults, drain, policies): importing xgrammar (torch and
transformers with it) and building each model's vocabulary view are left to the first request that needs a grammar,
as the flag's lazy mode does, instead of every start paying them. The session gateway here keeps the default."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GatewayProcess:
    """`gateway serve` on a free port; `stop()` sends SIGTERM like an operator would.

    With `config` it serves that file (`--threads`, for the default bundled worker, is left out);
    it counts as started once `ready_path` answers 200.
    """

    def __init__(
        self, *args: str, config: Path | None = None, ready_path: str = "/ready", startup_timeout: float = 300.0
    ):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - open while it runs; a pipe could fill up
        models = ["--config", str(config)] if config else ["--threads", "2"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--port", str(self.port), *models, *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        deadline = time.monotonic() + startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited early:\n{self.stderr()}")
            try:
                if httpx.get(f"{self.base_url}{ready_path}", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError("gateway did not become ready")

    def stderr(self) -> str:
        """What the gateway wrote to stderr so far (read without moving the offset the gateway writes at)."""
        fd = self._stderr.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def children(self) -> list[int]:
        """Pids of processes whose parent is the gateway."""
        out = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True, check=False
        )
        return [int(p) for p in out.stdout.split()]

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout)
        return self.proc.returncode


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


@pytest.fixture(scope="session")
def gateway() -> GatewayProcess:
    # The probe names no max_tokens; 64 is room for every forced call it asks for, and the model's
    # rambling answers (tool_choice auto) stop there instead of at the embedded default of 512.
    proc = GatewayProcess("--default-max-tokens", "64")
    yield proc
    children = proc.children()  # its worker (restarted by tests/e2e/test_lifecycle.py) and nothing else
    assert proc.stop() == 0, proc.stderr()  # SIGTERM: exit code 0
    deadline = time.monotonic() + 15
    while any(pid_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(pid_alive(pid) for pid in children), "a worker outlived the gateway"


@pytest.fixture(scope="session")
def model_id() -> str:
    return EMBEDDED_MODEL_ID


@pytest.fixture(scope="session")
def client(gateway):
    from openai import OpenAI

    return OpenAI(base_url=f"{gateway.base_url}/v1", api_key="unused", max_retries=0, timeout=120)
