"""Every Backend the gateway builds is ready on a healthy server, and its `close` releases its connections.

The interface's `close` is a no-op by default, so a backend that loses its own `close` in a refactor still runs:
the loss shows only as sockets left open. Each backend here is checked against a real keep-alive HTTP server that
counts the connections it holds open.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
from collections.abc import Callable

import pytest

import backends
from backends.base import Backend
from backends.router import Router
from backends.sglang import SGLangBackend
from backends.vllm import VLLMBackend

BUILDERS: dict[str, Callable[[str], Backend]] = {
    "SGLangBackend": SGLangBackend,
    "VLLMBackend": VLLMBackend,
    "Router": lambda url: Router(SGLangBackend, urls=[url]),
}


def all_backend_classes() -> set[type[Backend]]:
    """Every concrete Backend defined in the `backends` package (its modules imported first)."""
    for module in pkgutil.walk_packages(backends.__path__, "backends."):
        if not module.name.startswith("backends.worker"):
            importlib.import_module(module.name)
    found: set[type[Backend]] = set()
    todo = [Backend]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("backends.") and not inspect.isabstract(sub):
                found.add(sub)
    return found


class HealthServer(asyncio.Protocol):
    """A keep-alive HTTP/1.1 server that answers every request 200 and counts its open connections."""

    open = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        type(self).open += 1
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if b"\r\n\r\n" in data:
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}")

    def connection_lost(self, exc: Exception | None) -> None:
        type(self).open -= 1


def test_every_backend_class_is_checked_here() -> None:
    assert {cls.__name__ for cls in all_backend_classes()} == set(BUILDERS)


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(BUILDERS))
async def test_ready_on_a_healthy_server_and_close_releases_every_connection(name: str) -> None:
    HealthServer.open = 0
    server = await asyncio.get_running_loop().create_server(HealthServer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    backend = BUILDERS[name](f"http://127.0.0.1:{port}")
    try:
        assert await backend.ready()
        assert HealthServer.open >= 1  # the health check's connection stays in the keep-alive pool
        await backend.close()
        for _ in range(100):
            if HealthServer.open == 0:
                break
            await asyncio.sleep(0.01)
        assert HealthServer.open == 0, f"{name}.close() left {HealthServer.open} connection(s) open"
    finally:
        server.close()
        await server.wait_closed()
