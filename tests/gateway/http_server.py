"""Run an ASGI app under a real uvicorn server on a free local port, in a background thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn


@contextmanager
def serve(app, *, lifespan: str = "on", host: str = "127.0.0.1", port: int = 0, http: object = "auto") -> Iterator[str]:
    """Serve `app` on `host` (any 127.x.y.z works on Linux) until the block ends; yields its base URL. `http`: uvicorn's
    HTTP protocol (the gateway's own, gateway/process/client_timeouts.py, to test its timeouts)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # so asyncio sets TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan=lifespan, log_level="warning", http=http))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


def dead_url() -> str:
    """A local URL nobody listens on: connections to it are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"
