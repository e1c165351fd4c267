"""Shared fixtures: vLLM's own protocol models (when set up); the bundled worker as a real process is tests/conftest.py's
`worker_url`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from backends.checkpoint import load_checkpoint
from tests.backends.vllm_contract import VLLMOracle
from tests.conftest import WORKER_CONTEXT

ROOT = Path(__file__).resolve().parents[2]
CONTEXT = WORKER_CONTEXT
"""The context of the worker these tests share with tests/gateway/test_app_worker.py (`worker_url`)."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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
