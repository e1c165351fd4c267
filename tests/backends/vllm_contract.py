"""vLLM 0.33's request/response models, asked through tests/backends/vllm_oracle.py in a separate process.

vLLM cannot be installed into the project's environment, but its protocol modules
import with its Python sources and a few pure packages beside the project's venv
(`tests/backends/setup_vllm_contract.sh`). The oracle runs there, so vLLM's imports
and logging stay out of the test process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CONTRACT_DIR = Path(os.environ.get("VLLM_CONTRACT_DIR", Path.home() / ".cache/llm-gateway/vllm-0.33.0"))
ORACLE = Path(__file__).with_name("vllm_oracle.py")


class ContractError(AssertionError):
    """vLLM refused the payload (or would silently ignore part of it)."""


class VLLMOracle:
    """A running oracle process; `check(kind, body)` returns vLLM's reading of `body` or raises ContractError."""

    def __init__(self) -> None:
        sources, deps = CONTRACT_DIR / "src" / "vllm", CONTRACT_DIR / "deps"
        if not sources.is_dir() or not deps.is_dir():
            raise FileNotFoundError(f"no vLLM sources in {CONTRACT_DIR}: run tests/backends/setup_vllm_contract.sh")
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(CONTRACT_DIR / "src"), str(deps)]),
            VLLM_CONFIGURE_LOGGING="0",
            VLLM_TARGET_DEVICE="cpu",
        )
        self._proc = subprocess.Popen(
            [sys.executable, str(ORACLE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        ready = self._read()
        if ready != {"ready": True}:
            raise RuntimeError(f"the vLLM oracle did not start: {ready!r}")

    def check(self, kind: str, body: Any) -> dict[str, Any]:
        self._proc.stdin.write(json.dumps({"kind": kind, "body": body}) + "\n")
        self._proc.stdin.flush()
        answer = self._read()
        if "error" in answer:
            raise ContractError(answer["error"])
        return answer["ok"]

    def _read(self) -> dict[str, Any]:
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the vLLM oracle exited with {self._proc.wait()}")
        return json.loads(line)

    def close(self) -> None:
        self._proc.stdin.close()
        self._proc.wait(timeout=30)
