"""Shared fixtures: the real SmolLM2 checkpoint, and SGLang stand-in servers in both streaming modes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends.checkpoint import EMBEDDED_MODEL_ID, Checkpoint, load_checkpoint
from gateway.models.registry import ServedModel, served_model_from_checkpoint
from tests.gateway.http_server import serve
from tests.gateway.sglang_standin import SGLangStandIn


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def checkpoint() -> Checkpoint:
    return load_checkpoint()


@pytest.fixture(scope="session")
def tokenize_only(checkpoint) -> ServedModel:
    """The embedded model with no backend: for tokenizer-level tests."""
    return served_model_from_checkpoint(EMBEDDED_MODEL_ID, checkpoint, "hermes", None)


@pytest.fixture(params=[False, True], ids=["cumulative", "incremental"])
def standin(request) -> Iterator[tuple[SGLangStandIn, str]]:
    """A running SGLang stand-in (each streaming mode in turn) and its URL."""
    server = SGLangStandIn(incremental=request.param)
    with serve(server.app) as url:
        yield server, url
