"""The lean streaming client against raw TCP servers that answer with exactly the bytes a test scripts."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.base import BackendError, GenerateRequest, SamplingParams
from backends.http_stream import (
    MAX_KNOWN_HEAD_BYTES,
    MAX_KNOWN_HEADS,
    BodyLines,
    HTTPStatusError,
    StreamPool,
    _framings,
    _Response,
)
from backends.sglang import SGLangBackend
from backends.trace_context import current_traceparent
from tests.sockets import ESTABLISHED, close_wait_sockets, eventually, tcp_sockets

pytestmark = pytest.mark.anyio
Answer = Callable[[int, bytes], list[bytes] | None]
"""(connection's request number, request bytes) → the byte pieces to send, or None to close."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def raw_server(
    answer: Answer, *, close_after: bool = False, keepalive_s: float | None = None
) -> AsyncIterator[tuple[str, list[int]]]:
    """A TCP server on a free port; yields its URL and the number of requests each connection carried.

    `keepalive_s`: a connection that waits that long for its next request is closed (a server's keep-alive timeout).
    """
    per_connection: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = len(per_connection)
        per_connection.append(0)
        try:
            while True:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), keepalive_s)
                sizes = [h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")]
                length = int(sizes[0].split(b":")[1]) if sizes else 0
                request = head + await reader.readexactly(length)
                per_connection[index] += 1
                pieces = answer(per_connection[index], request)
                if pieces is None:
                    break
                for piece in pieces:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)
                if close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", per_connection
    finally:
        server.close()


def chunked(*pieces: bytes, head: bytes = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n") -> list[bytes]:
    return [head, *(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces), b"0\r\n\r\n"]


async def lines_of(pool: StreamPool, body: bytes = b"{}") -> list[bytes]:
    async with pool.post_lines("/generate", body) as batches:
        return [line async for lines in batches for line in lines]


async def test_chunked_lines_split_anywhere_and_connections_are_reused():
    events = [b'data: {"a": 1}\r\n\r\n', b"data: {", b'"b": 2}\n', b"\ndata: [DONE]\n\n"]
    async with raw_server(lambda n, req: chunked(*events)) as (url, per_connection):
        pool = StreamPool(url)
        for _ in range(3):
            assert await lines_of(pool) == [b'data: {"a": 1}', b"", b'data: {"b": 2}', b"", b"data: [DONE]", b""]
        await pool.close()
    assert per_connection == [3]


async def test_request_line_headers_and_body_on_the_wire():
    seen: list[bytes] = []

    def answer(n: int, request: bytes) -> list[bytes]:
        seen.append(request)
        return chunked(b"data: [DONE]\n")

    async with raw_server(answer) as (url, _):
        pool = StreamPool(url + "/prefix/")
        await lines_of(pool, b'{"x": 1}')
        await pool.close()
    head, body = seen[0].split(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /prefix/generate HTTP/1.1"
    assert b"Content-Length: 8" in head and b"Content-Type: application/json" in head and body == b'{"x": 1}'


async def test_chunk_extensions_and_trailers():
    pieces = [
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n",
        b"5;ext=1\r\nab\ncd\r\n",
        b"0\r\nX-T: 1\r\n\r\n",
    ]
    async with raw_server(lambda n, req: pieces) as (url, per_connection):
        pool = StreamPool(url)
        assert await lines_of(pool) == [b"ab", b"cd"]
        assert await lines_of(pool) == [b"ab", b"cd"]
        await pool.close()
    assert per_connection == [2]


async def test_sized_and_close_delimited_bodies():
    sized = [b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", b"data: 1\n", b"x\ny\n"]
    async with raw_server(lambda n, req: sized) as (url, per_connection):
        pool = StreamPool(url)
        assert await lines_of(pool) == [b"data: 1", b"x", b"y"]
        assert await lines_of(pool) == [b"data: 1", b"x", b"y"]
        await pool.close()
    assert per_connection == [2]
    unsized = [b"HTTP/1.0 200 OK\r\n\r\n", b"data: 1\n", b"tail"]
    async with raw_server(lambda n, req: unsized, close_after=True) as (url, per_connection):
        pool = StreamPool(url)
        assert await lines_of(pool) == [b"data: 1", b"tail"]
        assert await lines_of(pool) == [b"data: 1", b"tail"]
        await pool.close()
    assert per_connection == [1, 1]  # no length, no reuse


async def test_connection_close_header_is_honoured():
    pieces = chunked(b"x\n", head=b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    async with raw_server(lambda n, req: pieces, close_after=True) as (url, per_connection):
        pool = StreamPool(url)
        await lines_of(pool)
        await lines_of(pool)
        await pool.close()
    assert per_connection == [1, 1]


async def test_refusal_carries_status_and_body_and_keeps_the_connection():
    refusal = [b"HTTP/1.1 400 Bad Request\r\nContent-Length: 20\r\n\r\n", b'{"error": "no such"}']

    def answer(n: int, request: bytes) -> list[bytes]:
        return refusal if n == 1 else chunked(b"ok\n")

    async with raw_server(answer) as (url, per_connection):
        pool = StreamPool(url)
        with pytest.raises(HTTPStatusError) as info:
            await lines_of(pool)
        assert (info.value.status, info.value.body) == (400, b'{"error": "no such"}')
        assert await lines_of(pool) == [b"ok"]
        await pool.close()
    assert per_connection == [2]


async def test_a_refusal_is_what_the_pools_refused_makes_of_it():
    refusal = [b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 4\r\n\r\n", b"busy"]

    class Refused(Exception):
        pass

    async with raw_server(lambda n, req: refusal if n == 1 else chunked(b"ok\n")) as (url, per_connection):
        pool = StreamPool(url, refused=lambda status, body: Refused(status, body))
        with pytest.raises(Refused) as info:
            await lines_of(pool)
        assert info.value.args == (429, b"busy")
        assert await lines_of(pool) == [b"ok"]  # the refusal's connection was read to its end and kept
        await pool.close()
    assert per_connection == [2]


async def test_a_kept_connection_the_server_closed_is_replaced():
    def answer(n: int, request: bytes) -> list[bytes] | None:
        return chunked(b"ok\n") if n == 1 else None  # each connection serves one request, then closes when asked again

    async with raw_server(answer) as (url, per_connection):
        pool = StreamPool(url)
        assert await lines_of(pool) == [b"ok"]
        assert await lines_of(pool) == [b"ok"]  # the idle connection is dead: a fresh one, no error
        await pool.close()
    assert per_connection == [2, 1]  # the second request went out on the kept one, then on a fresh one


async def test_an_expired_idle_connection_is_not_used():
    async with raw_server(lambda n, req: chunked(b"ok\n")) as (url, per_connection):
        pool = StreamPool(url, keepalive_s=0.05)
        await lines_of(pool)
        await asyncio.sleep(0.1)
        await lines_of(pool)
        await pool.close()
    assert per_connection == [1, 1]


async def test_broken_streams_are_retryable_backend_errors():
    truncated = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"20\r\ndata: short"]
    garbage = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"zz\r\n"]
    said = {
        "truncated": "the connection closed before the answer ended",
        "garbage": "a chunk size that is not hexadecimal: b'zz'",
    }
    for case, pieces in (("truncated", truncated), ("garbage", garbage)):
        async with raw_server(lambda n, req, p=pieces: p, close_after=True) as (url, _):
            pool = StreamPool(url)
            with pytest.raises(BackendError) as info:
                await lines_of(pool)
            assert info.value.status == 503 and info.value.retryable
            assert str(info.value).endswith(f"failed: {said[case]}"), str(info.value)
            await pool.close()


async def test_unreachable_and_unanswered():
    async with raw_server(lambda n, req: None) as (url, _):
        pool = StreamPool(url)
        with pytest.raises(BackendError) as info:  # closed before any answer on a fresh connection
            await lines_of(pool)
        assert info.value.status == 503
        await pool.close()
    pool = StreamPool(url)  # the server is gone: connection refused
    with pytest.raises(BackendError) as info:
        await lines_of(pool)
    assert "unreachable" in str(info.value) and info.value.retryable


async def test_a_connect_past_its_timeout_is_unreachable():
    """A server whose accept queue is full never completes the handshake: the connect gives up at its timeout."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        fillers = [socket.socket() for _ in range(4)]  # never accepted: they fill the queue
        try:
            for filler in fillers:
                filler.setblocking(False)
                with suppress(BlockingIOError):
                    filler.connect(("127.0.0.1", port))
            pool = StreamPool(f"http://127.0.0.1:{port}", connect_timeout=0.2)
            with pytest.raises(BackendError) as info:
                await lines_of(pool)
            assert "unreachable: timed out" in str(info.value) and info.value.retryable
            await pool.close()
        finally:
            for filler in fillers:
                filler.close()


async def test_a_server_that_takes_the_request_but_never_answers_fails_at_the_head_timeout():
    """Accepted, read, then silence (a hung server with its socket open): a retryable 503 once `head_timeout_s`
    passed (the router then moves the request), not a wait until the request's deadline."""
    async with raw_server(lambda n, req: []) as (url, per_connection):
        pool = StreamPool(url, head_timeout_s=0.05, sweep_s=0.05)
        with pytest.raises(BackendError) as info:
            await lines_of(pool)
        assert info.value.status == 503 and info.value.retryable
        assert str(info.value).endswith("failed: no answer within 0.05 s"), str(info.value)
        await pool.close()
    assert per_connection == [1]  # given up, not tried again on a fresh connection


async def test_a_kept_connection_reset_inside_the_head_is_not_sent_the_request_again():
    """A reset after part of the head is a server that failed, not a kept connection it had closed: the request is
    not sent to the same server again on a fresh connection (the router moves it to another replica)."""
    requests = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        with suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0]))
                requests += 1
                if requests > 1:
                    break
                writer.write(b"".join(chunked(b"ok\n")))
            writer.write(b"HTTP/1.1 200")
            await writer.drain()
            await asyncio.sleep(0.05)  # the client reads the head's start (same loop) before the reset
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()  # with SO_LINGER 0: an RST

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        pool = StreamPool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        assert await lines_of(pool) == [b"ok"]
        with pytest.raises(BackendError) as info:
            await lines_of(pool)  # on the kept connection
        assert info.value.status == 503 and info.value.retryable
        assert requests == 2, requests  # not a third time on a fresh connection
        await pool.close()
    finally:
        server.close()


async def test_the_head_timeout_bounds_the_head_only():
    """A head in time, then a body slower than the head timeout: the whole answer (the stall limit is the router's)."""
    body_sent = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head, *rest = chunked(b"late\n")
        writer.write(head)
        await asyncio.sleep(0.3)  # several sweeps and head timeouts
        writer.write(b"".join(rest))
        body_sent.set()
        await reader.read()  # until the client closes (or keeps it: the server closes below)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        pool = StreamPool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", head_timeout_s=0.05, sweep_s=0.05)
        assert await lines_of(pool) == [b"late"]
        assert body_sent.is_set()
        await pool.close()
    finally:
        server.close()


async def test_leaving_early_closes_the_connection():
    async with raw_server(lambda n, req: chunked(b"a\n", b"b\n", b"c\n")) as (url, per_connection):
        pool = StreamPool(url)
        async with pool.post_lines("/generate", b"{}") as batches:
            assert (await anext(batches))[0] == b"a"
        assert await lines_of(pool) == [b"a", b"b", b"c"]
        await pool.close()
    assert per_connection == [1, 1]


def test_only_http_urls():
    with pytest.raises(ValueError):
        StreamPool("unix:///tmp/x")


async def test_an_idle_connection_the_server_closed_leaves_no_close_wait_socket():
    async with raw_server(lambda n, req: chunked(b"ok\n"), close_after=True) as (url, per_connection):
        port = int(url.rsplit(":", 1)[1])
        pool = StreamPool(url, sweep_s=0.05)
        assert await lines_of(pool) == [b"ok"]
        for _ in range(200):  # the server's close arrives, then the next sweep closes our end: bounded wait
            await asyncio.sleep(0.05)
            if not pool._idle:
                break
        assert not pool._idle
        await asyncio.sleep(0.05)  # the close reaches the kernel on the loop's next turn
        assert close_wait_sockets(port) == 0
        await pool.close()
    assert per_connection == [1]


async def closed_by_both(port: int) -> bool:
    """Wait for the server on `port` to close its side of every kept connection; then whether ours follows."""
    assert await eventually(lambda: tcp_sockets(port, ESTABLISHED, local=True) == 0)
    return await eventually(lambda: close_wait_sockets(port) == 0)


async def test_an_idle_connection_the_server_closed_is_closed_at_once_not_at_the_sweep():
    async with raw_server(lambda n, req: chunked(b"ok\n"), keepalive_s=0.1) as (url, per_connection):
        port = int(url.rsplit(":", 1)[1])
        pool = StreamPool(url, sweep_s=3600)
        assert await lines_of(pool) == [b"ok"]
        assert await closed_by_both(port)
        assert len(pool._idle) == 1 and not pool._idle[0].usable(60)  # still listed, no longer used
        assert await lines_of(pool) == [b"ok"]  # on a fresh connection
        await pool.close()
    assert per_connection == [1, 1]


async def test_a_small_call_answers_status_and_body_on_a_kept_connection():
    seen: list[bytes] = []

    def answer(n: int, request: bytes) -> list[bytes]:
        seen.append(request)
        return [b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope"] if n == 1 else chunked(b"ok\n")

    async with raw_server(answer) as (url, per_connection):
        pool = StreamPool(url)
        token = current_traceparent.set("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        assert await pool.call("GET", "/health") == (404, b"nope")
        current_traceparent.reset(token)
        assert await pool.call("POST", "/abort_request", b'{"rid":"r"}') == (200, b"ok\n")
        await pool.close()
    assert per_connection == [2]
    assert seen[0].startswith(b"GET /health HTTP/1.1\r\n") and b"Content-Length: 0\r\n" in seen[0]
    assert b"Accept: text/event-stream" not in seen[0] and b"traceparent" not in seen[0]
    assert seen[1].endswith(b'\r\n\r\n{"rid":"r"}')


async def test_health_checks_and_aborts_leave_no_close_wait_socket_once_the_server_closes():
    """The SGLang client's health check and its abort of a stream left early: the server answers, then closes its
    side as a keep-alive timeout does; our side must close too, with no further request (a CLOSE-WAIT leak
    otherwise, as the soak bench found with the health checks and aborts on an httpx pool)."""
    token = b'data: {"text":"","output_ids":[5],"meta_info":{"id":"r","finish_reason":null}}\n\n'
    paths: list[bytes] = []

    def answer(n: int, request: bytes) -> list[bytes]:
        paths.append(request.split(b" ", 2)[1])
        if request.startswith(b"POST /generate"):
            return [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"%x\r\n%s\r\n" % (len(token), token)]
        return [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"]

    async with raw_server(answer, keepalive_s=0.2) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        backend = SGLangBackend(url, incremental=True)
        assert await backend.ready()
        assert await closed_by_both(port)
        stream = backend.generate(GenerateRequest("r", [1, 2], SamplingParams(8)))
        assert (await anext(stream)).output_ids == [5]
        await stream.aclose()  # the caller leaves mid-stream: the backend is told to abort
        assert await eventually(lambda: paths[-1] == b"/abort_request")
        assert await closed_by_both(port)
        await backend.close()
        assert paths == [b"/health", b"/generate", b"/abort_request"]


async def test_a_refusal_read_cancelled_midway_closes_its_connection():
    """A refusal whose body never fully arrives, its reader cancelled: the connection is closed, not dropped."""
    answered, ended = asyncio.Event(), asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 503 Busy\r\nContent-Length: 100\r\n\r\npartial")
        answered.set()
        await reader.read()  # until our side closes
        ended.set()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    pool = StreamPool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    reading = asyncio.create_task(lines_of(pool))
    await answered.wait()
    await asyncio.sleep(0.1)  # the head is read (one loop turn on loopback); the body is awaited
    reading.cancel()
    with pytest.raises(asyncio.CancelledError) as kept:  # a kept traceback (a log record's) holds the reader's frames
        await reading
    await asyncio.wait_for(ended.wait(), 10)
    await pool.close()
    server.close()
    del kept


async def test_idle_connections_that_stay_open_are_kept_for_reuse():
    async with raw_server(lambda n, req: chunked(b"ok\n")) as (url, per_connection):
        pool = StreamPool(url, sweep_s=0.02)
        await lines_of(pool)
        await asyncio.sleep(0.1)  # several sweeps pass
        await lines_of(pool)
        await pool.close()
    assert per_connection == [2]


async def test_the_current_traceparent_goes_out_as_a_header():
    seen: list[bytes] = []

    def answer(n: int, request: bytes) -> list[bytes]:
        seen.append(request)
        return chunked(b"ok\n")

    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with raw_server(answer) as (url, _):
        pool = StreamPool(url)
        token = current_traceparent.set(trace)
        await lines_of(pool)
        current_traceparent.reset(token)
        await lines_of(pool)
        await pool.close()
    assert f"\r\ntraceparent: {trace}\r\n".encode() in seen[0]
    assert b"traceparent" not in seen[1]


def test_body_lines_the_same_however_the_bytes_arrive():
    """A chunked body fed at every split point (framing, CRLFs and lines cut anywhere) gives the same lines, and
    bytes after the terminating chunk mark the connection unusable."""
    body = b"".join(chunked(b"data: 1\r\n\r\n", b"data: {", b'"b": 2}\n', b"\ndata: [DONE]\n\nx\ry\r\r\ntail")[1:])
    body = body.replace(b"0\r\n\r\n", b"0\r\nx-trailer: 1\r\n\r\n")
    expected = [b"data: 1", b"", b'data: {"b": 2}', b"", b"data: [DONE]", b"", b"x\ry\r", b"tail"]  # one `\r` goes
    for cut in range(len(body) + 1):
        reader = BodyLines(chunked=True, length=None)
        lines = reader.feed(body[:cut]) + reader.feed(body[cut:])
        assert lines == expected and reader.complete and not reader.overrun, cut
    reader = BodyLines(chunked=True, length=None)
    reader.feed(body + b"HTTP/1.1")
    assert reader.complete and reader.overrun


def test_a_repeated_head_is_read_once_and_its_answers_share_no_body_state():
    head = b"HTTP/1.1 200 OK\r\nServer: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    first, second = _Response.parse_head(head), _Response.parse_head(head)
    assert _framings[head] == (200, True, None, True)
    assert first.body is not second.body
    assert first.body.feed(b"3\r\nab\n\r\n0\r\n\r\n") == [b"ab"] and first.complete
    assert not second.body.complete and second.body.feed(b"2\r\nc\n\r\n") == [b"c"]
    for n in range(MAX_KNOWN_HEADS + 1):  # distinct heads (sized answers): the memo stays bounded
        sized = _Response.parse_head(b"HTTP/1.0 404 Not Found\r\nContent-Length: %d\r\n\r\n" % n)
        assert (sized.status, sized.body.complete, sized.keep_alive) == (404, n == 0, False)
    assert len(_framings) <= MAX_KNOWN_HEADS
    long_head = b"HTTP/1.1 200 OK\r\nx-pad: %s\r\nContent-Length: 0\r\n\r\n" % (b"p" * MAX_KNOWN_HEAD_BYTES)
    assert _Response.parse_head(long_head).body.complete and long_head not in _framings  # memory stays bounded


def test_body_lines_sized_and_until_close():
    sized = BodyLines(chunked=False, length=7)
    assert sized.feed(b"ab\ncd") == [b"ab"] and not sized.complete
    assert sized.feed(b"\r\nef") == [b"cd"] and sized.complete and sized.overrun
    assert BodyLines(chunked=False, length=0).complete
    until_close = BodyLines(chunked=False, length=None)
    assert until_close.feed(b"a\nb") == [b"a"] and until_close.end() == [b"b"] and until_close.complete
    with pytest.raises(asyncio.IncompleteReadError):
        BodyLines(chunked=True, length=None).end()


async def test_the_rest_after_the_finish_is_read_without_the_caller_and_the_connection_kept():
    events = [b"data: finish\n\n", b"data: [DONE]\n\n"]
    async with raw_server(lambda n, req: chunked(*events)) as (url, per_connection):
        pool = StreamPool(url)
        for _ in range(2):
            posted = pool.post_lines("/generate", b"{}")
            async with posted as batches:
                assert (await anext(batches))[0] == b"data: finish"
                posted.read_rest_later()
            assert await eventually(lambda: len(pool._idle) == 1)  # read to its end by the connection: kept
        await pool.close()
    assert per_connection == [2]


async def test_a_rest_that_does_not_end_within_a_sweep_loses_the_connection():
    answers: list[int] = []

    def answer(n: int, request: bytes) -> list[bytes]:
        answers.append(n)
        pieces = chunked(b"data: finish\n\n")
        return pieces if len(answers) > 1 else pieces[:-1]  # the first answer never sends its last chunk

    async with raw_server(answer) as (url, per_connection):
        pool = StreamPool(url, sweep_s=0.05)
        posted = pool.post_lines("/generate", b"{}")
        async with posted as batches:
            assert await anext(batches) == [b"data: finish", b""]
            posted.read_rest_later()
        assert await eventually(lambda: not pool._finishing)
        assert not pool._idle
        assert await lines_of(pool) == [b"data: finish", b""]
        await pool.close()
    assert per_connection == [1, 1]


async def test_a_slow_consumer_pauses_the_reads_and_gets_every_line():
    lines = [b"data: %d %s" % (i, b"x" * 100) for i in range(8000)]  # ~900 KiB: past what waits unread
    piece = b"".join(line + b"\n" for line in lines)
    async with raw_server(lambda n, req: chunked(piece)) as (url, per_connection):
        pool = StreamPool(url)
        posted = pool.post_lines("/generate", b"{}")
        async with posted as batches:
            got = list(await anext(batches))
            connection = posted._connection
            assert await eventually(lambda: not connection.transport.is_reading())  # the rest waits in the kernel
            got += [line async for batch in batches for line in batch]
        assert got == lines
        assert await lines_of(pool) == lines  # read to its end: the connection was kept
        await pool.close()
    assert per_connection == [2]


async def test_bytes_after_a_body_or_while_idle_lose_the_connection():
    """Bytes past the body's end in the same read, or bytes that come while no request is out: the connection
    is not used again."""
    late = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answer = b"".join(chunked(b"ok\n"))
        with suppress(asyncio.IncompleteReadError):  # our side closed
            while head := await reader.readuntil(b"\r\n\r\n") + await reader.readexactly(2):  # our body is `{}`
                if b"/overrun" in head:
                    writer.write(answer + b"HTTP/1.1 200 OK\r\n")
                    continue
                writer.write(answer)
                await asyncio.sleep(0.05)
                writer.write(b"junk")
                late.set()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    pool = StreamPool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    async with pool.post_lines("/overrun", b"{}") as batches:
        assert [line async for batch in batches for line in batch] == [b"ok"]
    assert not pool._idle
    assert await lines_of(pool) == [b"ok"]
    await late.wait()
    assert await eventually(lambda: not pool._idle[0].usable(60))
    await pool.close()
    server.close()


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(
        st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"")), min_size=1, max_size=8
    ),
    framing=st.lists(st.sampled_from(["%x", "%X", "%x;ext=1", "%x ", "0%x"]), min_size=8, max_size=8),
    crlf=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=6),
)
def test_body_lines_of_any_chunking_and_reads(events, framing, crlf, cuts):
    """Events framed one chunk each (size lines in any case, with extensions and padding), the bytes cut into reads
    anywhere: the same lines, whichever path (one whole chunk per read, or split) each read takes."""
    end = b"\r\n" if crlf else b"\n"
    lines = [b"data: " + event for event in events]
    pieces = [line + end + end for line in lines]
    body = b"".join((framing[i] % len(p)).encode() + b"\r\n" + p + b"\r\n" for i, p in enumerate(pieces)) + b"0\r\n\r\n"
    reader, got, start = BodyLines(chunked=True, length=None), [], 0
    for cut in sorted({c for c in cuts if c < len(body)}) + [len(body)]:
        got += reader.feed(body[start:cut])
        start = cut
    assert reader.complete and not reader.overrun
    assert got == [line for line in lines for line in (line, b"")]


@pytest.mark.parametrize("size_line", [b"3", b"3;name=value", b"03 ", b"3\t;x"])
def test_a_read_of_exactly_one_chunk_gives_its_lines_whatever_its_size_line(size_line: bytes) -> None:
    """One chunk per read (one event, usually) takes a short path; a size line with an extension or padding is
    left to the full chunk parser, with the same lines."""
    body = BodyLines(chunked=True, length=None)
    assert body.feed(size_line + b"\r\nab\n\r\n") == [b"ab"]
    assert body.feed(b"0\r\n\r\n") == [] and body.complete


@pytest.mark.parametrize("data", [b"a\rb\n\n", b"a\r\n\r\n", b"a\r\nb\n\n", b"a\n\r", b"\r\n\n"])
def test_a_read_of_one_chunk_with_a_carriage_return_gives_the_lines_of_a_split_read(data: bytes) -> None:
    """A `\\r` in a chunk's data (a lone one stays in its line, a `\\r\\n` ends one): the same lines whether the
    chunk comes in one read (the short path, or the full parser when its data holds a CRLF) or byte by byte."""
    chunk = b"%x\r\n" % len(data) + data + b"\r\n0\r\n\r\n"
    whole, split = BodyLines(chunked=True, length=None), BodyLines(chunked=True, length=None)
    lines = whole.feed(chunk[: -len(b"0\r\n\r\n")]) + whole.feed(b"0\r\n\r\n")
    assert lines == [line for i in range(len(chunk)) for line in split.feed(chunk[i : i + 1])]
    assert whole.complete and split.complete
