"""Fixtures of the policy tests: a real redis-server shared by the session, and one a test may kill; the
SmolLM2 tokenizer directory and one fault backend process (SGLang's contract) for the HTTP tests."""

from __future__ import annotations

import pytest

from tests.faults.conftest import FaultBackend, smollm2, start  # noqa: F401 - smollm2: a fixture
from tests.redis_server import RedisServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def own_redis_server(tmp_path):
    """A redis-server of this test alone (to kill and restart)."""
    with RedisServer(tmp_path) as server:
        yield server


@pytest.fixture(scope="session")
def standin_backend(smollm2):  # noqa: F811
    """A fault backend serving well (tests that change its fault set it back)."""
    backend = FaultBackend(smollm2)
    try:
        start(backend)
        yield backend
    finally:
        backend.stop()
