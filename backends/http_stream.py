"""Requests to one backend over HTTP/1.1 keep-alive connections on asyncio streams.

The hot path of the gateway is reading backend events: httpx spends 113–168 µs of CPU per streamed
event here (bench/RESULTS.md, "Gateway overhead"), most of it in layers this use does not need
(anyio cancel scopes per read, text decoding, header re-parsing). This client sends a JSON POST and
hands back the response body's lines as bytes (`post_lines`), or makes a small call (`call`: health
checks, aborts), reusing connections between requests. An idle connection the server closed is closed
here within `sweep_s`, not when the next request comes (a pool that waits for it holds a CLOSE-WAIT
socket for as long as the backend is idle).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager, suppress
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from backends.base import BackendError
from backends.trace_context import current_traceparent

MAX_ERROR_BODY = 64 * 1024
"""How much of a refusal's body is read (its message)."""
MAX_CALL_BODY = 1024 * 1024
"""How much of a small call's answer is read (a model list, a health answer)."""
_STREAM_HEAD = "Accept: text/event-stream\r\n"
_BROKEN = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)
"""What a connection that breaks, or a server that breaks HTTP, raises while we read or write."""


class HTTPStatusError(Exception):
    """The server answered with a status other than 200."""

    def __init__(self, status: int, body: bytes):
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = field(default_factory=time.monotonic)

    def usable(self, keepalive_s: float) -> bool:
        fresh = time.monotonic() - self.idle_since < keepalive_s
        return fresh and not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class StreamPool:
    """Keep-alive connections to the server at `base_url`; `post_lines` streams one request's answer."""

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout: float = 5.0,
        keepalive_s: float = 4.0,
        max_idle: int = 256,
        sweep_s: float = 1.0,
    ):
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if url.scheme == "https" else None
        self._prefix = url.path.rstrip("/")
        self._head = f"Host: {url.netloc}\r\nContent-Type: application/json\r\n"
        self._connect_timeout = connect_timeout
        self._keepalive_s = keepalive_s
        self._max_idle = max_idle
        self._idle: list[_Connection] = []
        self._sweep_s = sweep_s
        self._sweep: asyncio.TimerHandle | None = None
        self.base_url = base_url

    @asynccontextmanager
    async def post_lines(self, path: str, body: bytes) -> AsyncIterator[AsyncIterator[bytes]]:
        """POST `body`; once the server answered 200, the body's lines (without line ends).

        A non-200 answer is an HTTPStatusError; a server that cannot be reached, or a connection that
        breaks, is a retryable 503 BackendError (also while the lines are read).
        """
        trace = current_traceparent.get()
        head = _STREAM_HEAD if trace is None else f"{_STREAM_HEAD}traceparent: {trace}\r\n"
        connection, response = await self._request("POST", path, body, head)
        if response.status != 200:
            error_body = await self._read_body(connection, response, MAX_ERROR_BODY)
            raise HTTPStatusError(response.status, error_body)
        try:
            async with aclosing(response.lines()) as lines:
                yield lines
        finally:
            self._done(connection, response)

    async def call(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """A small request on the same pool (no traceparent: a health check's task outlives the request that
        started it): the answer's status and body (a broken one reads as empty).

        A server that cannot be reached, or a connection that breaks before the answer's head, is a
        retryable 503 BackendError.
        """
        connection, response = await self._request(method, path, body, "")
        return response.status, await self._read_body(connection, response, MAX_CALL_BODY)

    async def _request(self, method: str, path: str, body: bytes, extra_head: str) -> tuple[_Connection, _Response]:
        """Send the request on an idle connection (a fresh one if it turns out closed) and read the head."""
        head = self._head + extra_head
        request = f"{method} {self._prefix}{path} HTTP/1.1\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode()
        while True:
            connection = self._take_idle()
            reused = connection is not None
            if connection is None:
                connection = await self._connect()
            try:
                connection.writer.write(request + body)
                await connection.writer.drain()
                return connection, await _Response.read_head(connection.reader, self.base_url)
            except _BROKEN as e:
                connection.close()
                if reused and _closed_before_answering(e):
                    continue  # the server closed this idle connection as we sent: try a fresh one
                raise _broken(self.base_url, e) from None
            except BaseException:
                connection.close()
                raise

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable(self._keepalive_s):
                return connection
            connection.close()
        return None

    async def _connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self._host, self._port, ssl=self._ssl), self._connect_timeout
            )
        except (OSError, TimeoutError) as e:
            raise BackendError(f"backend {self.base_url} unreachable: {e!r}", status=503, retryable=True) from None
        return _Connection(reader, writer)

    async def _read_body(self, connection: _Connection, response: _Response, limit: int) -> bytes:
        """The answer's body (its first `limit` bytes; empty if the connection breaks); the connection goes back
        to the pool if the body was read to its end, else (broken, cancelled) it is closed."""
        try:
            return await response.read_all(limit)
        except _BROKEN:
            return b""
        finally:
            self._done(connection, response)

    def _done(self, connection: _Connection, response: _Response) -> None:
        """Keep the connection for the next request if its answer was read to the end; else close it."""
        if response.complete and response.keep_alive and len(self._idle) < self._max_idle:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
            if self._sweep is None:
                self._sweep = asyncio.get_running_loop().call_later(self._sweep_s, self._sweep_idle)
        else:
            connection.close()

    def _sweep_idle(self) -> None:
        """Close idle connections the server closed (else their sockets sit in CLOSE-WAIT until the next
        request) or that outlived the keep-alive; again every `sweep_s` while any stay idle."""
        self._sweep = None
        usable = []
        for connection in self._idle:
            if connection.usable(self._keepalive_s):
                usable.append(connection)
            else:
                connection.close()
        self._idle = usable
        if usable:
            self._sweep = asyncio.get_running_loop().call_later(self._sweep_s, self._sweep_idle)

    async def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
        for connection in idle:
            with suppress(*_BROKEN):
                await connection.writer.wait_closed()


class _Response:
    """A response head, and its body read as chunked, sized or until the connection closes."""

    def __init__(
        self, reader: asyncio.StreamReader, base_url: str, status: int, headers: dict[bytes, bytes], http10: bool
    ):
        self._reader = reader
        self._base_url = base_url
        self.status = status
        self.complete = False
        connection = headers.get(b"connection", b"").lower()
        self._chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        length = headers.get(b"content-length")
        self._length = int(length) if length is not None and not self._chunked else None
        self.keep_alive = (self._chunked or self._length is not None) and (
            b"keep-alive" in connection if http10 else b"close" not in connection
        )

    @classmethod
    async def read_head(cls, reader: asyncio.StreamReader, base_url: str) -> _Response:
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head[:-4].split(b"\r\n")
        version, status, *_ = status_line.split(b" ", 2)
        headers: dict[bytes, bytes] = {}
        for line in lines:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        return cls(reader, base_url, int(status), headers, version == b"HTTP/1.0")

    async def lines(self) -> AsyncIterator[bytes]:
        """The body's lines, `\\r\\n` or `\\n` ended; a connection that breaks is a retryable 503."""
        pending = b""
        try:
            async for data in self._pieces():
                pending += data
                if b"\n" in data:
                    *complete, pending = pending.split(b"\n")
                    for line in complete:
                        yield line[:-1] if line.endswith(b"\r") else line
        except _BROKEN as e:
            raise _broken(self._base_url, e) from None
        if pending:
            yield pending

    async def read_all(self, limit: int) -> bytes:
        out = b""
        async for data in self._pieces():
            out += data[: limit - len(out)]
        return out

    async def _pieces(self) -> AsyncIterator[bytes]:
        reader = self._reader
        if self._chunked:
            while size := int((await reader.readuntil(b"\n")).split(b";", 1)[0].strip(), 16):
                yield (await reader.readexactly(size + 2))[:-2]
            while (await reader.readuntil(b"\n")).strip():
                pass  # trailers
        elif self._length is not None:
            left = self._length
            while left:
                data = await reader.read(min(left, 65536))
                if not data:
                    raise asyncio.IncompleteReadError(b"", left)
                left -= len(data)
                yield data
        else:
            while data := await reader.read(65536):
                yield data
        self.complete = True


def _closed_before_answering(error: BaseException) -> bool:
    """The server closed the connection before any byte of an answer (a stale keep-alive connection)."""
    if isinstance(error, asyncio.IncompleteReadError):
        return not error.partial
    return isinstance(error, ConnectionResetError | BrokenPipeError)


def _broken(base_url: str, error: BaseException) -> BackendError:
    return BackendError(f"backend {base_url} failed: {error!r}", status=503, retryable=True)
