"""`gateway serve` starts its worker, and SIGTERM / Ctrl-C stop both with no orphan left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx

from backends.checkpoint import EMBEDDED_MODEL_ID
from tests.e2e.conftest import ROOT, GatewayProcess, pid_alive


def test_ctrl_c_stops_gateway_and_worker():
    """SIGINT; SIGTERM is the way test_a_worker_that_dies_is_restarted stops its gateway, with the same checks."""
    gw = GatewayProcess()
    workers = gw.children()
    assert len(workers) == 1 and pid_alive(workers[0])
    gw.proc.send_signal(signal.SIGINT)
    assert gw.proc.wait(30) == 0
    deadline = time.monotonic() + 15
    while pid_alive(workers[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(workers[0]), "worker outlived the gateway"


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


def test_a_worker_that_dies_is_restarted():
    gw = GatewayProcess()
    try:
        (first,) = gw.children()
        os.kill(first, signal.SIGKILL)
        body = {"model": EMBEDDED_MODEL_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
        deadline = time.monotonic() + 300  # a bound for an event that must happen, not a speed check
        while True:
            assert time.monotonic() < deadline, f"no worker came back:\n{gw.stderr()}"
            workers = [p for p in gw.children() if p != first]
            if workers and httpx.post(f"{gw.base_url}/v1/chat/completions", json=body, timeout=60).status_code == 200:
                break
            time.sleep(0.5)
        assert not pid_alive(first)
    finally:
        assert gw.stop() == 0  # SIGTERM: exit code 0, and no worker left behind
    deadline = time.monotonic() + 15
    while pid_alive(workers[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(workers[0]), "the restarted worker outlived the gateway"
