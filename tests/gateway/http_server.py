"""Run an ASGI app under a real uvicorn server on a free local port, in a background thread; or one connection
through uvicorn's HTTP protocol in memory."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState


@contextmanager
def serve(app, *, lifespan: str = "on", host: str = "127.0.0.1", port: int = 0, http: object = "auto") -> Iterator[str]:
    """Serve `app` on `host` (any 127.x.y.z works on Linux) until the block ends; yields its base URL. `http`: uvicorn's
    HTTP protocol (the gateway's own, backends/client_timeouts.py, to test its timeouts)."""
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


def small_send_buffers(protocol: type[asyncio.Protocol], high_water: int | None = None) -> type[asyncio.Protocol]:
    """`protocol` with the kernel's send buffer of each connection at its least (and the transport's buffer paused
    past `high_water` bytes, else asyncio's 64 KiB): a client that stops reading fills them within a few answer
    chunks (autotuned, it took megabytes of answer, 6-10 s of output at load 15-20)."""

    class SmallSendBuffer(protocol):  # type: ignore[misc,valid-type]
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            if high_water is not None:
                transport.set_write_buffer_limits(high=high_water)
            super().connection_made(transport)

    return SmallSendBuffer


def dead_url() -> str:
    """A local URL nobody listens on: connections to it are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def head_refusal(port: int, max_head_bytes: int) -> bytes:
    """The status line a server answers a head of one header sent in 16 KiB writes (at most 4x the bound past it
    and two reads' worth, 512 KiB), or b"" when the connection was reset first."""
    return answer_while_sending(port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Endless: ", 4 * max_head_bytes + 512 * 1024)[:12]


def answer_while_sending(port: int, start: bytes, more: int) -> bytes:
    """What a server answers a client that sends `start` and then `more` bytes in 16 KiB writes before it reads:
    b"" when the connection was reset (a server that closes with the client's bytes unread sends a reset, which
    can discard its answer before it is read); a server that neither answers nor closes fails (the timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        try:
            client.sendall(start)
            for _ in range(more // 16384):
                client.sendall(b"a" * 16384)
            answer = b""
            while data := client.recv(65536):
                answer += data
            return answer
        except ConnectionError:
            return b""


class MemoryTransport:
    """What uvicorn's HTTP protocol asks of a transport, in memory: what it writes, whether it closed."""

    def __init__(self) -> None:
        self.written = b""
        self.closing = False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def serve_connection(
    protocol_class: type[HttpToolsProtocol], config: uvicorn.Config, state: ServerState, request: bytes
) -> tuple[HttpToolsProtocol, bytes]:
    """One connection through `protocol_class` (`config` loaded), in memory in the running loop: made, `request` in
    one read, its answer, closed. The protocol, and what it wrote."""
    transport = MemoryTransport()
    protocol = protocol_class(config=config, server_state=state, app_state={}, _loop=asyncio.get_running_loop())
    protocol.connection_made(transport)  # type: ignore[arg-type]
    protocol.data_received(request)
    await asyncio.gather(*state.tasks)
    protocol.connection_lost(None)
    return protocol, transport.written
