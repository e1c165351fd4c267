"""A TCP fault proxy for tests: put it between the gateway and a dependency (Redis, a backend) and break the link.

`TcpFaultProxy(upstream_port)` listens on a port of its own (`.port`, `.url_for(scheme)`) and runs its event loop in
a thread of the test process. `set(mode, after=..., delay_s=..., rst=...)` changes what every connection (open or
new) does with the bytes the upstream sends back, counted per connection since the client last sent (the answer to
its latest request):

- `pass`: forward both ways.
- `delay`: hold each chunk from the upstream `delay_s` seconds (a slow server; order kept per connection).
- `trickle`: forward the upstream's bytes one at a time, each `delay_s` seconds after the last (a server whose
  answer arrives a byte per read).
- `stall`: after `after` bytes from the upstream, forward nothing more to the client (the requests still reach the
  upstream: a server that works but whose answers never come back); `set("pass")` lets the held bytes go.
- `blackhole`: accept and forward nothing either way (a server that stopped answering with its socket open); what
  the client sends meanwhile is dropped, never delivered later (a partition that lost the packets).
- `cut`: after `after` bytes from the upstream, close both sides (with `rst`, the client side gets an RST).
- `corrupt`: after `after` bytes from the upstream, every byte forwarded is replaced by `garbage`'s bytes.

`stale()` makes every connection open now close (FIN) as soon as the client sends on it again, without forwarding
(a keep-alive connection the server closed just as the next request arrived); new connections pass.
`lose_answers(n, skip=k)`: past the next `k` answers, the next `n` (on any connection) are dropped, and their
connection closed, after their request reached the upstream (a server that ran a command whose answer the network
lost); the rest pass as `set` says.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Self

MODES = ("pass", "delay", "trickle", "stall", "blackhole", "cut", "corrupt")


@dataclass(frozen=True)
class Fault:
    """What the proxy does now (see the module's docstring)."""

    mode: str = "pass"
    after: int = 0
    delay_s: float = 0.0
    rst: bool = False
    garbage: bytes = b"\xff\x00garbage\r\n"


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, proxy: TcpFaultProxy, client: tuple[asyncio.StreamReader, asyncio.StreamWriter]):
        self.proxy = proxy
        self.client_reader, self.client_writer = client
        self.from_upstream = 0
        self.stale = False

    async def run(self) -> None:
        try:
            upstream_reader, self.upstream_writer = await asyncio.open_connection("127.0.0.1", self.proxy.upstream_port)
        except OSError:
            self.client_writer.close()
            return
        pumps = [
            asyncio.ensure_future(self._to_upstream()),
            asyncio.ensure_future(self._to_client(upstream_reader)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            self.close()
            await asyncio.gather(*pumps, return_exceptions=True)

    async def _to_upstream(self) -> None:
        while data := await self.client_reader.read(65536):
            if self.stale:
                self.proxy.stale_hits += 1
                return
            if self.proxy.fault.mode == "blackhole":
                continue
            self.from_upstream = 0  # a new request: `after` counts the bytes of its answer
            self.upstream_writer.write(data)
            await self.upstream_writer.drain()

    async def _to_client(self, upstream: asyncio.StreamReader) -> None:
        while data := await upstream.read(65536):
            for chunk in self._split(data):
                if not await self._forward(chunk):
                    return

    def _split(self, data: bytes) -> list[bytes]:
        """`data` cut where the fault's `after` falls inside it, so the fault starts at the exact byte."""
        fault = self.proxy.fault
        cut = fault.after - self.from_upstream
        return [data[:cut], data[cut:]] if 0 < cut < len(data) else [data]

    async def _forward(self, chunk: bytes) -> bool:
        """Send `chunk` to the client as the fault says; False once the link is to be closed."""
        fault = self.proxy.fault
        if self.from_upstream == 0 and self.proxy.answers_to_skip:
            self.proxy.answers_to_skip -= 1
        elif self.from_upstream == 0 and self.proxy.answers_to_lose:
            self.proxy.answers_to_lose -= 1
            return False
        faulty = self.from_upstream >= fault.after
        if fault.mode == "delay":
            await asyncio.sleep(fault.delay_s)
        elif fault.mode == "trickle":
            for byte in range(len(chunk)):
                self.client_writer.write(chunk[byte : byte + 1])
                await self.client_writer.drain()
                await asyncio.sleep(fault.delay_s)
            self.from_upstream += len(chunk)
            return True
        elif faulty and fault.mode in ("stall", "blackhole"):
            await self.proxy.flowing_downstream()
        elif faulty and fault.mode == "cut":
            if fault.rst:
                self.client_writer.get_extra_info("socket").setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
            return False
        elif faulty and fault.mode == "corrupt":
            chunk = (fault.garbage * (len(chunk) // len(fault.garbage) + 1))[: len(chunk)]
        self.from_upstream += len(chunk)
        self.client_writer.write(chunk)
        await self.client_writer.drain()
        return True

    def close(self) -> None:
        for writer in (self.client_writer, getattr(self, "upstream_writer", None)):
            if writer is not None:
                writer.close()


class TcpFaultProxy:
    """A proxy to 127.0.0.1:`upstream_port` on `port` (0: a free one), breaking the link as `set()` says."""

    def __init__(self, upstream_port: int, port: int = 0):
        self.upstream_port = upstream_port
        self.fault = Fault()
        self.links: set[_Link] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        """The connection handlers running now: `stop()` waits for them before the loop stops."""
        self.accepted = 0
        """Client connections accepted so far."""
        self.stale_hits = 0
        """Requests that arrived on a connection `stale()` marked (and closed it)."""
        self.answers_to_skip = self.answers_to_lose = 0
        """Answers still to let through, then to drop (`lose_answers`)."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._downstream = asyncio.Event()
        self._downstream.set()
        self._server: asyncio.Server | None = None
        self._requested_port = port
        self.port = 0

    def url_for(self, scheme: str) -> str:
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._accept, "127.0.0.1", self._requested_port))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def set(self, mode: str = "pass", **fault: object) -> None:
        """Replace the fault for every connection, open ones included."""
        assert mode in MODES, mode
        self.fault = Fault(mode, **fault)  # type: ignore[arg-type]

        def apply() -> None:
            (self._downstream.set if mode not in ("stall", "blackhole") else self._downstream.clear)()

        self._call(_run(apply))

    def stale(self) -> None:
        """Every connection open now closes at its client's next bytes, which are not forwarded."""

        def mark() -> None:
            for link in self.links:
                link.stale = True

        self._call(_run(mark))

    def lose_answers(self, count: int = 1, skip: int = 0) -> None:
        """Past the next `skip` answers, the next `count` are lost, and their connections closed, once their requests
        reached the upstream."""

        def arm() -> None:
            self.answers_to_skip, self.answers_to_lose = skip, count

        self._call(_run(arm))

    def open_links(self) -> int:
        """Client connections open now."""
        return self._call(_run(lambda: len(self.links)))

    def stop(self) -> None:
        """Stop listening (its port refuses connections from now on) and close every link; again: nothing."""
        if not self._thread.is_alive():
            return

        async def shut() -> None:
            assert self._server is not None
            self._server.close()
            for link in list(self.links):
                link.close()
            self._downstream.set()
            if self._handlers:  # their links are closed: each ends at its next read
                await asyncio.wait(self._handlers, timeout=5)
            for handler in self._handlers:
                handler.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)

        self._call(shut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def flowing_downstream(self) -> None:
        await self._downstream.wait()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        link = _Link(self, (reader, writer))
        handler = asyncio.current_task()
        assert handler is not None
        self.links.add(link)
        self._handlers.add(handler)
        try:
            await link.run()
        finally:
            self.links.discard(link)
            self._handlers.discard(handler)

    def _call(self, work):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(10)


async def _run(function):  # type: ignore[no-untyped-def]
    return function()
