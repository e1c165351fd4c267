"""Suite-wide: OpenMP threads that sleep when they wait, the repository's bytecode compiled once, how pytest-xdist
shares the tests between its two processes, and one TLS context for every httpx client the tests make."""

from __future__ import annotations

import compileall
import functools
import os
import re
import ssl
import subprocess
import sys
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import httpx._transports.default as httpx_transports
import pytest
from hypothesis import settings as hypothesis_settings
from xdist.scheduler import LoadFileScheduling

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
"""Before torch is imported here or in any process the tests start (gateways, workers, canitoolcall's): the suite
runs more torch threads than the machine has cores (two xdist processes, each with workers of 2 threads), and
libgomp's default lets a waiting thread spin for its whole time slice while the thread it waits for is not
running. tests/e2e/test_openai_client.py, -n0, on the 2 cores at load average 5-6: 150 / 110 CPU-s and 198 /
163 s with the default, 26 / 24 CPU-s and 27 / 30 s passive (bench/RESULTS.md, "Test-suite CPU, session 8")."""

hypothesis_settings.register_profile("suite", derandomize=True, database=None)
hypothesis_settings.register_profile("explore", derandomize=False)
hypothesis_settings.load_profile(os.environ.get("GATEWAY_HYPOTHESIS_PROFILE", "suite"))
"""Property tests draw the same cases on every run (seeded from each test's name), so a run's verdict depends on the
code alone; `GATEWAY_HYPOTHESIS_PROFILE=explore` draws fresh cases each run (and keeps hypothesis' example database)
to hunt for new failures by hand. A test's own `@settings` (max_examples, deadline) still applies over either."""

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("gateway", "backends", "policies", "tests")
"""The repository's packages: every process the tests start (dozens a run: gateways, workers, fault backends,
oracles) imports a few hundred of their modules."""
TEST_MODULE = re.compile(r"[/\\]test_[^/\\]*\.py$")
"""Left to pytest, which compiles its own assertion-rewritten copy."""

sys.dont_write_bytecode = False
"""This machine sets PYTHONDONTWRITEBYTECODE=1, so no process writes the repository's bytecode and each one compiled
its modules from source. The pytest processes now write it beside the sources (`__pycache__/`, ignored by git, as
Python does by default), their assertion-rewritten test modules too; the processes they start still write nothing
(the variable stays set) but read what is there. Site-packages' bytecode is read as before."""


def pytest_configure(config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or -n0's only process): before any test process starts
        for package in SOURCES:  # a file whose bytecode is current is only looked at
            compileall.compile_dir(ROOT / package, quiet=1, rx=TEST_MODULE)
        if (config.getoption("numprocesses", None) or 0) > 1:
            _convert_the_embedded_model()


CONVERT_THE_EMBEDDED_MODEL = (
    "from backends.checkpoint import load_checkpoint\n"
    "from backends.worker.weights import load_weights\n"
    "load_weights(load_checkpoint())\n"
)


def _convert_the_embedded_model() -> None:
    """The embedded GGUF's metadata and float32 weights into the conversion cache once, before the test processes
    start. Their cache key holds the GGUF's path, so a fresh clone's new .venv converts them (3.4 + 5.1 CPU-s), and
    both xdist processes' first units (the e2e gateway and its worker, tests/worker's in-process model, the
    conformance run) converted them side by side; when the cache has them this only looks."""
    from backends.checkpoint import embedded_gguf_path, gguf_cache_folder

    path = embedded_gguf_path()
    metadata = gguf_cache_folder(path, "metadata", str(ROOT / "backends" / "checkpoint.py"))
    weights = gguf_cache_folder(path, "float32 weights", str(ROOT / "backends" / "worker" / "weights.py"))
    if metadata is None or weights is None:  # the cache is off: each process converts, as it would anyway
        return
    if (metadata / "checkpoint.json").is_file() and (weights / "model.safetensors").is_file():
        return
    subprocess.run([sys.executable, "-c", CONVERT_THE_EMBEDDED_MODEL], cwd=ROOT, check=True)  # torch stays out of here


SHARED_SCOPES = (
    ("tests/e2e/",),
    ("tests/worker/",),
    ("tests/backends/test_vllm_", "tests/gateway/test_app_worker.py"),
)
"""Groups of path prefixes whose files share a session fixture that is costly to start, so that all of a group's
files go to one process (one unit, named by its first prefix) and the fixture starts once: tests/e2e one `gateway
serve` with its model; tests/worker the in-process model and engine (~2.4 CPU-s to build each); the vLLM dialect's
tests and the gateway's in front of the worker one worker process (`worker_url`, ~4 CPU-s to start)."""


SLOW_FIRST = (
    "tests/e2e/",
    "tests/conformance/test_conformance.py",
    "tests/faults/",
    "tests/worker/",
    "tests/policies/",
    "tests/gateway/test_process_group.py",
)
"""Units that start processes or run the model (tens of seconds each, often in few tests): handed out before the
others, so that neither process is left running one of them at the end while the other idles. xdist would hand
out the units with the most tests first, which left the slowest (few tests each) for last: 24 s of one idle
process at the end of a measured run."""


class _FilesAndSharedScopes(LoadFileScheduling):
    """`--dist loadfile`, except that each group of SHARED_SCOPES is one unit and SLOW_FIRST's go out first."""

    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return next((group[0] for group in SHARED_SCOPES if path.startswith(group)), path)

    def _assign_work_unit(self, node) -> None:
        if not self._ordered:  # the queue is complete before the first unit goes out
            slow_first = sorted(self.workqueue.items(), key=lambda unit: not unit[0].startswith(SLOW_FIRST))
            self.workqueue = OrderedDict(slow_first)  # a stable sort: xdist's order within each group
            self._ordered = True
        super()._assign_work_unit(node)


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "loadfile":
        return _FilesAndSharedScopes(config, log)
    return None


WORKER_CONTEXT = 1024
"""The context of the shared worker (`worker_url`): room for a prompt with tools and 900 generated tokens."""


@pytest.fixture(scope="session")
def worker_url() -> Iterator[str]:
    """The bundled worker (the embedded model) as a process on a free port, speaking both the SGLang and the vLLM
    dialects; its users are one unit of SHARED_SCOPES, so it starts once a run."""
    from gateway.process.supervisor import WorkerProcess, WorkerSpec

    worker = WorkerProcess(WorkerSpec(threads=2, max_batch=2, context_length=WORKER_CONTEXT))
    try:
        yield worker.wait_ready()
    finally:
        worker.stop()


_create_ssl_context = httpx_transports.create_ssl_context


@functools.cache
def _default_ssl_context(trust_env: bool) -> ssl.SSLContext:
    return _create_ssl_context(verify=True, trust_env=trust_env)


def _ssl_context(verify: object = True, cert: object = None, trust_env: bool = True) -> ssl.SSLContext:
    """httpx's TLS context for a new client, built once for the default settings: httpx builds one for every client
    (plain-HTTP ones and each `httpx.get()` too), and loading the CA bundle costs ~25 ms of CPU; the tests make
    thousands of clients, in polls above all."""
    if verify is True and cert is None:
        return _default_ssl_context(trust_env)
    return _create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)


httpx_transports.create_ssl_context = _ssl_context
