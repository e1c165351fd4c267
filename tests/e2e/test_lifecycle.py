"""`gateway serve` starts its worker, and SIGTERM / Ctrl-C stop both with no orphan left."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from backends.checkpoint import EMBEDDED_MODEL_ID
from tests.e2e.conftest import ROOT, GatewayProcess, pid_alive


def test_a_group_of_two_shares_one_worker_merges_metrics_and_stops_on_ctrl_c():
    """`--workers 2` on the bundled worker: the parent starts the worker once, both processes answer chats through it,
    /metrics merges their counts, and SIGINT stops the group and the worker (SIGTERM is the way the session gateway
    is stopped, with the same checks: tests/e2e/conftest.py)."""
    gw = GatewayProcess("--workers", "2")
    try:
        found = re.search(r"metrics sockets are in (\S+)", gw.stderr())
        assert found, gw.stderr()
        sockets = [Path(found[1]) / f"process-{i}.sock" for i in range(2)]
        deadline = time.monotonic() + 300  # a bound for an event that must happen, not a speed check
        while not all(s.exists() for s in sockets):
            assert time.monotonic() < deadline and gw.proc.poll() is None, gw.stderr()
            time.sleep(0.2)
        children = gw.children()
        workers = [pid for pid in children if "backends.worker" in _command(pid)]
        assert len(children) == 3 and len(workers) == 1, [_command(pid) for pid in children]
        assert not any(_children_of(pid) for pid in children)  # the gateway processes start no worker of their own
        body = {"model": EMBEDDED_MODEL_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        for _ in range(6):  # fresh connections: the kernel spreads them over both processes
            answer = httpx.post(f"{gw.base_url}/v1/chat/completions", json=body, timeout=120)
            assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 2, answer.text
        merged = _chats(httpx.get(f"{gw.base_url}/metrics").text)
        assert merged == 6 and sum(_chats(_own_metrics(s)) for s in sockets) == 6
    finally:
        gw.proc.send_signal(signal.SIGINT)
        assert gw.proc.wait(30) == 0
    deadline = time.monotonic() + 15
    while any(pid_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(pid_alive(pid) for pid in children), "a process outlived the group"


def _command(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _children_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


def _own_metrics(path: Path) -> str:
    """One group process's own exposition, from its metrics socket."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))
        return b"".join(iter(lambda: sock.recv(65536), b"")).decode()


def _chats(exposition: str) -> float:
    """Answered chats (status 200) in a metrics exposition."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in exposition.splitlines()
        if line.startswith("gateway:requests_total{")
        and 'route="/v1/chat/completions"' in line
        and 'status="200"' in line
    )


def test_bad_config_is_a_clear_error(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("models:\n  - id: m\n    backend: {type: teleport}\n")
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(cfg)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert "backend.type" in out.stderr and "teleport" in out.stderr


def test_a_worker_that_dies_is_restarted(gateway, model_id):
    """The session gateway's worker is killed: the gateway starts another, which answers. At the end of the session
    tests/e2e/conftest.py stops the gateway with SIGTERM: exit code 0, and no worker (this restarted one) left."""
    (first,) = [pid for pid in gateway.children() if "backends.worker" in _command(pid)]
    os.kill(first, signal.SIGKILL)
    body = {"model": model_id, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    deadline = time.monotonic() + 300  # a bound for an event that must happen, not a speed check
    while True:
        assert time.monotonic() < deadline, f"no worker came back:\n{gateway.stderr()}"
        workers = [p for p in gateway.children() if p != first and "backends.worker" in _command(p)]
        if workers and httpx.post(f"{gateway.base_url}/v1/chat/completions", json=body, timeout=60).status_code == 200:
            break
        time.sleep(0.5)
    assert not pid_alive(first)
