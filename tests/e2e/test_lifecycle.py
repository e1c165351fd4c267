"""`gateway serve` starts its worker, and SIGTERM / Ctrl-C stop both with no orphan left."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.e2e.conftest import ROOT, GatewayProcess, pid_alive


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_gateway_and_worker(sig):
    gw = GatewayProcess()
    workers = gw.children()
    assert len(workers) == 1 and pid_alive(workers[0])
    gw.proc.send_signal(sig)
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
