"""DrainingServer's `on_serving` hook (what `--grammar-warmup` starts its thread from): called once the listener is up."""

from __future__ import annotations

import socket

import uvicorn

from gateway.process.draining import DrainingServer, DrainState


async def no_app(scope, receive, send) -> None:
    raise AssertionError("no request is sent")


def test_on_serving_is_called_once_the_server_listens():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    calls = []

    def on_serving() -> None:
        with socket.create_connection(listener.getsockname(), timeout=5):  # accepted into the backlog: listening
            calls.append("connected")
        server.should_exit = True

    config = uvicorn.Config(no_app, lifespan="off", log_level="warning", log_config=None)
    server = DrainingServer(config, DrainState(), 0, on_serving)
    server.run(sockets=[listener])
    assert calls == ["connected"]
