"""Shared fixtures: the bundled worker as a real process, and vLLM's own protocol models (when set up)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from backends.checkpoint import load_checkpoint
from gateway.process.supervisor import WorkerProcess, WorkerSpec
from tests.backends.vllm_contract import VLLMOracle

ROOT = Path(__file__).resolve().parents[2]
CONTEXT = 256


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def worker_url() -> Iterator[str]:
    """A worker (the embedded model) on a free port, speaking both the SGLang and the vLLM dialects."""
    worker = WorkerProcess(WorkerSpec(threads=2, max_batch=2, context_length=CONTEXT))
    try:
        yield worker.wait_ready()
    finally:
        worker.stop()


@pytest.fixture(scope="session")
def oracle() -> Iterator[VLLMOracle]:
    """vLLM 0.33's request/response models (scripts/setup.sh --test runs tests/backends/setup_vllm_contract.sh)."""
    checker = VLLMOracle()
    yield checker
    checker.close()


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    """The embedded model's tokenizer, to read generated ids as text."""
    return load_checkpoint().tokenizer
