"""Fixtures of the policy tests: a real redis-server shared by the session, and one a test may kill."""

from __future__ import annotations

import pytest

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
