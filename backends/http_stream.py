"""Requests to one backend over HTTP/1.1 keep-alive connections, each an asyncio Protocol (`_Connection`).

The hot path of the gateway is reading backend events: httpx spends 113–168 µs of CPU per streamed
event here (bench/RESULTS.md, "Gateway overhead"), most of it in layers this use does not need
(anyio cancel scopes per read, text decoding, header re-parsing); a StreamReader and a reader generator cost
a buffer copy and two coroutines per read. This client sends a JSON POST and hands back the response body's
lines as bytes, a socket read's worth at a time, cut in the read's own callback (`post_lines`), or makes a small
call (`call`: health checks, aborts), reusing connections between requests. An idle connection the server closed
is closed here at once (a pool that waits for the next request holds a CLOSE-WAIT socket for as long as the
backend is idle), and dropped from the pool within `sweep_s`. A server that takes the request but sends no answer's
head within `head_timeout_s` (give or take two sweeps) has its connection closed: the request fails as retryable, so
the router can move it to another replica before any output.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

from backends.base import BackendError
from backends.trace_context import current_traceparent

MAX_ERROR_BODY = 64 * 1024
"""How much of a refusal's body is read (its message)."""
MAX_CALL_BODY = 1024 * 1024
"""How much of a small call's answer is read (a model list, a health answer)."""
_STREAM_HEAD = "Accept: text/event-stream\r\n"
MAX_HEAD = 64 * 1024
"""The longest response head read."""
MAX_UNREAD_BYTES = 256 * 1024
"""How much of a stream may wait for a slow consumer before reads pause."""
_BROKEN = (OSError, asyncio.IncompleteReadError, ValueError)
# On the per-event path `bytes.find(x) >= 0` stands for `x in bytes`: `in` first tries `x` as an integer and
# formats and clears that TypeError, which costs more than the search (a third of a one-event read's parsing).
"""What a connection that breaks, or a server that breaks HTTP, raises while we read or write."""


class HTTPStatusError(Exception):
    """The server answered with a status other than 200."""

    def __init__(self, status: int, body: bytes):
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body


class _Connection(asyncio.Protocol):
    """One keep-alive connection as an asyncio Protocol: the bytes a read brings go straight to whoever waits.

    Before a stream's body (the head, a refusal's or a small call's body) the reads are kept as they come and a
    waiting coroutine is woken; during a stream's body (`stream_lines`) every read is cut into lines at once
    (BodyLines) and the lines are handed to the waiting consumer as the result of the future it awaits: no
    StreamReader buffer, no reader coroutine, no generator per read. Reads pause while more than
    `MAX_UNREAD_BYTES` of a stream wait for a slow consumer. An idle connection that the server closes (or that
    gets bytes nobody asked for) is closed at once.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, base_url: str):
        self._loop = loop
        self._base_url = base_url
        self.transport: asyncio.Transport | None = None
        self.idle_since = time.monotonic()
        self.lost = False
        self._lost_error: BaseException | None = None
        self._closed = loop.create_future()
        self._raw: list[bytes] = []
        """Reads kept as they came (before a stream's body)."""
        self._woken: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._idle = False
        self._body: BodyLines | None = None
        """A stream's body being cut into lines (None: the reads are kept raw)."""
        self._lines: list[bytes] = []
        """Lines read while the consumer was busy."""
        self._unread = 0
        self._paused = False
        self._waiter: asyncio.Future[list[bytes]] | None = None
        self._end: BaseException | None = None
        """What the stream's consumer gets once `_lines` is taken: StopAsyncIteration or the error that ended it."""
        self._then: Callable[[], None] | None = None
        """Called once the stream's body ends, when its consumer left the rest to be read here."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._lost_error is None:  # else the pool gave up on this connection (`give_up`): its error stands
            self._lost_error = exc
        if not self._closed.done():
            self._closed.set_result(None)
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if self._body is not None and self._end is None:
            try:
                lines = self._body.end() if exc is None else []
                self._deliver(lines, StopAsyncIteration() if exc is None else _broken(self._base_url, exc))
            except asyncio.IncompleteReadError as e:
                self._deliver([], _broken(self._base_url, e))
        else:
            self._wake()

    def data_received(self, data: bytes) -> None:
        body = self._body
        if body is None:
            if self._idle:  # nothing may come while no request is out: the connection is unusable
                self.transport.close()  # type: ignore[union-attr]
                return
            self._raw.append(data)
            self._wake()
            return
        if self._end is not None:
            body.overrun = body.complete  # bytes after the body's end: the connection is not reused
            return
        try:
            lines = body.feed(data)
        except ValueError as e:  # a chunk size that is not hex
            self.transport.close()  # type: ignore[union-attr]
            self._deliver([], _broken(self._base_url, e))
            return
        if body.complete:
            self._deliver(lines, StopAsyncIteration())
        elif lines:
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                self._waiter = None
                waiter.set_result(lines)
            elif self._then is None:
                self._lines += lines
                self._unread += len(data)
                if self._unread > MAX_UNREAD_BYTES and not self._paused:
                    self._paused = True
                    self.transport.pause_reading()  # type: ignore[union-attr]

    def pause_writing(self) -> None:
        self._drained = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    def _wake(self) -> None:
        woken = self._woken
        if woken is not None and not woken.done():
            woken.set_result(None)
        self._woken = None

    def _deliver(self, lines: list[bytes], end: BaseException) -> None:
        """The stream's last lines and how it ends: to the waiting consumer, else kept for it."""
        self._end = end
        if self._then is not None:
            then, self._then = self._then, None
            then()
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            self._waiter = None
            if lines or self._lines:
                waiter.set_result(self._lines + lines)
                self._lines = []
            else:
                waiter.set_exception(end)
        else:
            self._lines += lines

    def usable(self, keepalive_s: float) -> bool:
        fresh = time.monotonic() - self.idle_since < keepalive_s
        return fresh and not self.lost and not self.transport.is_closing()  # type: ignore[union-attr]

    def close(self) -> None:
        self.transport.close()  # type: ignore[union-attr]

    def closed_unanswered(self, error: BaseException) -> bool:
        """`error` is the server closing this connection before any byte of an answer (a kept connection it closed
        as the request went out: sent again on a fresh one), not partway through the head (a server that failed:
        never sent the request again)."""
        return not self._raw and isinstance(error, asyncio.IncompleteReadError | ConnectionResetError | BrokenPipeError)

    def give_up(self, error: OSError) -> None:
        """Stop waiting for the answer: whoever waits gets `error` (a failure of the backend), and the connection
        is dropped."""
        self.lost, self._lost_error = True, error
        self.transport.abort()  # type: ignore[union-attr]
        self._wake()

    async def wait_closed(self) -> None:
        await self._closed

    async def send(self, data: bytes) -> None:
        """Write a request (waiting only if the socket did not take it all)."""
        if self.lost:
            raise ConnectionResetError("the connection is closed")
        self._idle = False
        self.transport.write(data)  # type: ignore[union-attr]
        if self._drained is not None:
            await self._drained
            if self.lost:
                raise ConnectionResetError("the connection closed while the request was sent")

    def _more(self) -> asyncio.Future[None]:
        """What to await for the next read (a future: no coroutine per wait); raises at once once the connection
        ended (an IncompleteReadError, or the error that ended it)."""
        if self.lost:
            if self._lost_error is not None:
                raise self._lost_error
            raise asyncio.IncompleteReadError(b"".join(self._raw), None)
        self._woken = woken = self._loop.create_future()
        return woken

    async def read_head(self) -> bytes:
        """The response head, up to and including its blank line; what follows stays for the body."""
        while True:
            if not self._raw:  # nothing read yet (the request was just sent): nothing to look at
                await self._more()
                continue
            raw = self._raw[0] if len(self._raw) == 1 else b"".join(self._raw)
            if not raw.startswith(b"HTTP/") and not b"HTTP/".startswith(raw):
                raise ValueError(f"an answer that is not HTTP: {raw[:16]!r}")  # no blank line may ever come
            end = raw.find(b"\r\n\r\n")
            if end >= 0:
                self._raw = [raw[end + 4 :]] if end + 4 < len(raw) else []
                return raw[: end + 4]
            if len(raw) > MAX_HEAD:
                raise ValueError(f"a response head over {MAX_HEAD} bytes")
            self._raw = [raw]
            await self._more()

    async def read_raw(self, body: BodyLines, limit: int) -> bytes:
        """The body bytes (its first `limit`) through `body`'s framing, to the body's end."""
        out = b""
        while True:
            raw, self._raw = self._raw, []
            for data in raw:
                out += body.bytes_of(data)[: limit - len(out)]
            if body.complete:
                return out
            if self.lost and self._lost_error is None and not self._raw:
                body.end()  # a body that ends with the connection; a framed one cut short raises
                return out
            await self._more()

    def stream_lines(self, body: BodyLines) -> _Connection:
        """From now on the reads are `body`'s lines, given in batches by iterating this connection."""
        self._body, self._end, self._lines = body, None, []
        raw, self._raw = self._raw, []
        if body.complete:
            self._end = StopAsyncIteration()
        for data in raw:
            self.data_received(data)
        if self.lost and self._end is None:
            self.connection_lost(self._lost_error)
        return self

    def read_rest_here(self, then: Callable[[], None]) -> None:
        """The consumer leaves the rest of the stream's body (what follows its finish): it is read and dropped by
        this connection's own callback, and `then` called once the body ended (read to its end, or broken)."""
        self._lines = []
        if self._end is not None:
            then()
            return
        self._then = then
        if self._paused:
            self._paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]

    def done_streaming(self) -> None:
        """The stream's consumer is done: the connection idles (raw reads) until its next request."""
        self._body, self._lines, self._end = None, [], None
        self._idle = True
        if self._paused:
            self._paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]

    def __aiter__(self) -> _Connection:
        return self

    def __anext__(self) -> asyncio.Future[list[bytes]]:
        """The lines of the reads since the last batch (a future: awaiting it costs no coroutine)."""
        future = self._loop.create_future()
        lines = self._lines
        if lines:
            self._lines, self._unread = [], 0
            if self._paused:
                self._paused = False
                self.transport.resume_reading()  # type: ignore[union-attr]
            future.set_result(lines)
        elif self._end is not None:
            future.set_exception(self._end)
        else:
            self._waiter = future
        return future


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
        head_timeout_s: float | None = 30.0,
        refused: Callable[[int, bytes], Exception] = HTTPStatusError,
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
        self._refused = refused
        self._keepalive_s = keepalive_s
        self._max_idle = max_idle
        self._idle: list[_Connection] = []
        self._finishing: dict[_Connection, float] = {}
        """Connections whose answer's rest is being read (`PostedLines.read_rest_later`), and since when."""
        self._sweep_s = sweep_s
        self._sweep: asyncio.TimerHandle | None = None
        self._head_timeout_s = head_timeout_s
        self._head_sweeps = None if head_timeout_s is None else max(1, math.ceil(head_timeout_s / sweep_s))
        """The sweeps a connection may wait for an answer's head through (None: no limit)."""
        self._asking: dict[_Connection, int] = {}
        """Connections sent a request and waiting for its answer's head, and the sweeps they waited through (a
        count, not a time: no clock read or float per request)."""
        self.base_url = base_url

    def post_lines(self, path: str, body: bytes) -> PostedLines:
        """POST `body`; once the server answered 200, the body's lines (without line ends), in batches: the lines
        one socket read completed (several events that arrived together cost one step of every layer above).
        An async context manager (`async with pool.post_lines(...) as batches`).

        A non-200 answer is the pool's `refused(status, body)` (an HTTPStatusError unless told otherwise); a server
        that cannot be reached, or a connection that breaks, is a retryable 503 BackendError (also while the lines
        are read).
        """
        return PostedLines(self, path, body)

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
            self._asking[connection] = 0
            if self._sweep is None and self._head_sweeps is not None:
                self._sweep_later()
            try:
                await connection.send(request + body)
                return connection, _Response.parse_head(await connection.read_head())
            except _BROKEN as e:
                connection.close()
                if reused and connection.closed_unanswered(e):
                    continue  # the server closed this idle connection as we sent: try a fresh one
                raise _broken(self.base_url, e) from None
            except BaseException:
                connection.close()
                raise
            finally:
                del self._asking[connection]

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable(self._keepalive_s):
                return connection
            connection.close()
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(loop, self.base_url), self._host, self._port, ssl=self._ssl),
                self._connect_timeout,
            )
        except (OSError, TimeoutError) as e:
            raise BackendError(
                f"backend {self.base_url} unreachable: {describe_failure(e)}", status=503, retryable=True
            ) from None
        return connection

    async def _read_body(self, connection: _Connection, response: _Response, limit: int) -> bytes:
        """The answer's body (its first `limit` bytes; empty if the connection breaks); the connection goes back
        to the pool if the body was read to its end, else (broken, cancelled) it is closed."""
        try:
            return await connection.read_raw(response.body, limit)
        except _BROKEN:
            return b""
        finally:
            self._done(connection, response)

    def _done(self, connection: _Connection, response: _Response) -> None:
        """Keep the connection for the next request if its answer was read to the end; else close it."""
        connection.done_streaming()
        if response.complete and response.keep_alive and len(self._idle) < self._max_idle:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
            self._sweep_later()
        else:
            connection.close()

    def _done_later(self, connection: _Connection, response: _Response) -> None:
        """`_done` once the connection itself has read the rest of the answer's body (within a sweep or two)."""

        def then() -> None:
            if self._finishing.pop(connection, None) is not None:
                self._done(connection, response)

        self._finishing[connection] = time.monotonic()
        connection.read_rest_here(then)
        self._sweep_later()

    def _sweep_later(self) -> None:
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self._sweep_s, self._sweep_idle)

    def _sweep_idle(self) -> None:
        """Close idle connections the server closed (else their sockets sit in CLOSE-WAIT until the next
        request) or that outlived the keep-alive, those whose answer's rest took longer than `sweep_s`, and those
        whose answer's head is late; again every `sweep_s` while any are left."""
        self._sweep = None
        usable = []
        for connection in self._idle:
            if connection.usable(self._keepalive_s):
                usable.append(connection)
            else:
                connection.close()
        self._idle = usable
        late = time.monotonic() - self._sweep_s
        for connection, since in list(self._finishing.items()):
            if since < late:
                del self._finishing[connection]
                connection.close()
        self._time_out_heads()
        if usable or self._finishing or self._asking:
            self._sweep_later()

    def _time_out_heads(self) -> None:
        """Give up on the connections whose answer's head took longer than `head_timeout_s` (this sweep's check)."""
        limit = self._head_sweeps
        if limit is None:
            return
        for connection, sweeps in list(self._asking.items()):
            if sweeps >= limit:
                connection.give_up(TimeoutError(f"no answer within {self._head_timeout_s:g} s"))
            else:
                self._asking[connection] = sweeps + 1

    async def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        idle, self._idle = [*self._idle, *self._finishing], []
        self._finishing.clear()
        for connection in idle:
            connection.close()
        for connection in idle:
            await connection.wait_closed()


class PostedLines:
    """One `post_lines` request as an async context manager (a class: a generator-based one costs a layer of
    generator steps on entry and exit, per request): the request is sent on entry, which gives the body's line
    batches once the server answered 200; on exit the batches are closed and the connection kept or closed."""

    __slots__ = ("_body", "_connection", "_left", "_path", "_pool", "_response")

    def __init__(self, pool: StreamPool, path: str, body: bytes):
        self._pool = pool
        self._path = path
        self._body = body

    async def __aenter__(self) -> AsyncIterator[list[bytes]]:
        pool = self._pool
        trace = current_traceparent.get()
        head = _STREAM_HEAD if trace is None else f"{_STREAM_HEAD}traceparent: {trace}\r\n"
        connection, response = await pool._request("POST", self._path, self._body, head)
        if response.status != 200:
            error_body = await pool._read_body(connection, response, MAX_ERROR_BODY)
            raise pool._refused(response.status, error_body)
        self._connection, self._response = connection, response
        self._left = False
        return connection.stream_lines(response.body)

    async def __aexit__(self, *exc_info: object) -> None:
        if not self._left:
            self._pool._done(self._connection, self._response)

    def read_rest_later(self) -> None:
        """The caller has the stream's finish and reads no further: what follows (`[DONE]`, the body's end) is read
        by the connection's own callback, which gives the connection back to the pool once the body ended; nobody
        waits for it. A server that takes longer than the pool's `sweep_s` loses the connection."""
        self._left = True
        self._pool._done_later(self._connection, self._response)


class _Response:
    """A response head: its status, whether the connection stays open after it, and its body's framing."""

    __slots__ = ("body", "keep_alive", "status")

    def __init__(self, status: int, chunked: bool, length: int | None, keep_alive: bool):
        self.status = status
        self.body = BodyLines(chunked, length)
        self.keep_alive = keep_alive

    @property
    def complete(self) -> bool:
        """The body was read to its end (and not past it): the connection can carry the next request."""
        return self.body.complete and not self.body.overrun

    @classmethod
    def parse_head(cls, head: bytes) -> _Response:
        """The response of `head`, its framing read once per distinct head: a server sends the same head to every
        stream (the date aside, within a second), and a Python step per field line costs more than the rest of
        reading a one-token answer's head and first event."""
        framing = _framings.get(head)
        if framing is None:
            framing = _framing(head)
            if len(head) <= MAX_KNOWN_HEAD_BYTES:
                if len(_framings) >= MAX_KNOWN_HEADS:
                    _framings.clear()
                _framings[head] = framing
        return cls(*framing)


MAX_KNOWN_HEADS = 256
"""How many distinct heads' framings are kept (`_Response.parse_head`)."""
MAX_KNOWN_HEAD_BYTES = 2048
"""The longest head whose framing is kept (a server's usual head is a few hundred bytes): the kept heads take at most
MAX_KNOWN_HEADS times this much memory, whatever a server sends."""
_framings: dict[bytes, tuple[int, bool, int | None, bool]] = {}


def _framing(head: bytes) -> tuple[int, bool, int | None, bool]:
    """A head's status, whether its body is chunked, its length (None: chunked or until the connection closes),
    and whether the connection stays open after the body."""
    status_line, *lines = head[:-4].split(b"\r\n")
    version, status, *_ = status_line.split(b" ", 2)
    headers: dict[bytes, bytes] = {}
    for line in lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    connection = headers.get(b"connection", b"").lower()
    chunked = headers.get(b"transfer-encoding", b"").lower().find(b"chunked") >= 0
    length = headers.get(b"content-length")
    keep_alive = (chunked or length is not None) and (
        connection.find(b"keep-alive") >= 0 if version == b"HTTP/1.0" else connection.find(b"close") < 0
    )
    return int(status), chunked, int(length) if length is not None and not chunked else None, keep_alive


class BodyLines:
    """An HTTP/1.1 response body fed as it arrives (chunked, `length` bytes, or until the connection closes),
    cut into lines: bytes in, lines out, so a whole socket read costs one call."""

    __slots__ = ("_chunked", "_crlf", "_framing", "_left", "_pending", "_trailers", "complete", "overrun")

    def __init__(self, chunked: bool, length: int | None):
        self.complete = length == 0 and not chunked
        self.overrun = False
        """Bytes came after the body's end (nothing a server that keeps the connection open may send)."""
        self._chunked = chunked
        self._left = length  # sized: body bytes still due; chunked: bytes of the current chunk's data still due
        self._crlf = 0  # chunked: bytes of the CRLF after a chunk's data still to skip
        self._framing = b""  # chunked: an incomplete size or trailer line
        self._trailers = False
        self._pending = b""  # an incomplete body line

    def feed(self, data: bytes) -> list[bytes]:
        """The lines that `data` completes (and the body's last, unterminated line once the body is complete)."""
        whole = None
        if self._chunked and not (self._left or self._crlf or self._framing or self._trailers):
            # A read of exactly one whole non-empty chunk (size line, data, CRLF) whose data holds no CRLF (one event,
            # usually): one split (a `find` per part would cost more), in line (a call per event costs as much).
            parts = data.split(b"\r\n", 3)  # at most 4 parts, however many chunks the read holds
            if len(parts) == 3 and not parts[2]:
                try:
                    size = int(parts[0], 16)  # a `;extension` is a ValueError
                except ValueError:
                    size = 0
                if size and size == len(parts[1]):
                    whole = parts[1]
        data = self.bytes_of(data) if whole is None else whole
        # Whole lines (one event, usually) that no `\r\n` ends: a lone `\r` stays in its line either way.
        if not self._pending and data[-1:] == b"\n" and (whole is not None or data.find(b"\r") < 0):
            lines = data.split(b"\n")
            del lines[-1]
            return lines
        cut = data.rfind(b"\n") + 1
        if cut:
            whole, self._pending = self._pending + data[:cut], data[cut:]
            if whole.find(b"\r") >= 0:  # a line's `\r\n` end (only a `\r` right before `\n` goes; a lone `\r` stays)
                whole = whole.replace(b"\r\n", b"\n")
            lines = whole.split(b"\n")
            del lines[-1]  # after the last `\n`: nothing
        else:
            self._pending += data
            lines = []
        if self.complete and self._pending:
            lines.append(self._pending)
            self._pending = b""
        return lines

    def end(self) -> list[bytes]:
        """The connection closed: the last, unterminated line; a chunked or sized body cut short is an error."""
        if not self.complete and (self._chunked or self._left):
            raise asyncio.IncompleteReadError(b"", self._left)
        self.complete = True
        last, self._pending = self._pending, b""
        return [last] if last else []

    def bytes_of(self, data: bytes) -> bytes:
        """The body bytes in `data` (framing and trailers removed; nothing past the body's end)."""
        if self._chunked:
            return self._unchunk(data)
        if self._left is None:
            return data
        if len(data) >= self._left:
            self.overrun = len(data) > self._left
            data, self._left, self.complete = data[: self._left], 0, True
        else:
            self._left -= len(data)
        return data

    def _unchunk(self, data: bytes) -> bytes:
        out = []
        pos, size = 0, len(data)
        left, crlf = self._left or 0, self._crlf  # in locals while the loop runs (it runs a few times per event)
        while pos < size:
            if self.complete:
                self.overrun = True
                break
            if left:
                end = min(size, pos + left)
                out.append(data[pos:end])
                left -= end - pos
                pos = end
                if not left:
                    crlf = 2
            elif crlf:
                step = min(crlf, size - pos)
                crlf -= step
                pos += step
            else:
                newline = data.find(b"\n", pos)
                if newline < 0:
                    self._framing += data[pos:]
                    break
                line, self._framing = (self._framing + data[pos:newline]).strip(), b""
                pos = newline + 1
                if self._trailers:
                    self.complete = not line
                elif chunk := _chunk_size(line):
                    left = chunk
                else:
                    self._trailers = True
        self._left, self._crlf = left, crlf
        return out[0] if len(out) == 1 else b"".join(out)


def _chunk_size(line: bytes) -> int:
    """The size on a chunk's size line (its `;extensions` dropped); ValueError naming the line when it is not hex."""
    try:
        return int(line.split(b";", 1)[0], 16)
    except ValueError:
        raise ValueError(f"a chunk size that is not hexadecimal: {line[:16]!r}") from None


def _broken(base_url: str, error: BaseException) -> BackendError:
    return BackendError(f"backend {base_url} failed: {describe_failure(error)}", status=503, retryable=True)


def describe_failure(error: BaseException) -> str:
    """A connection's failure in words a client can read (not a Python repr)."""
    if isinstance(error, asyncio.IncompleteReadError):
        return "the connection closed before the answer ended"
    if isinstance(error, TimeoutError):
        return str(error) or "timed out"
    if isinstance(error, ConnectionResetError):
        return "the connection was reset"
    if isinstance(error, BrokenPipeError):
        return "the connection closed while the request was sent"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__
