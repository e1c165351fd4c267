"""Slow-loris: a client trickling its request headers is cut at the header timeout, one sending endless headers at
their size bound, one trickling its body under the minimum rate; a prompt one is served, and so is a pipelined one
however long it runs, and a body that keeps its rate however long it takes. (Stalled bodies and clients that stop
reading: tests/faults/test_tcp_faults.py.)"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from contextlib import ExitStack
from types import SimpleNamespace

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

from backends.client_timeouts import DEFAULT_SEND_TIMEOUT_S, MAX_HEAD_BYTES, client_timeout_protocol
from tests.gateway.http_server import answer_while_sending, head_refusal, serve, serve_connection

TIMEOUT_S = 0.5


def test_headers_trickled_past_the_timeout_close_the_connection():
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("ok"))])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, http=client_timeout_protocol(TIMEOUT_S, DEFAULT_SEND_TIMEOUT_S), log_level="warning", timeout_keep_alive=60
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as prompt:
            for _ in range(2):  # two requests on one keep-alive connection, each sent at once
                prompt.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                assert prompt.recv(4096).startswith(b"HTTP/1.1 200")
        with socket.create_connection(("127.0.0.1", port), timeout=10) as loris:
            closed = False
            for byte in b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200:  # one byte every 20 ms: ~4 s
                try:
                    loris.sendall(bytes([byte]))
                except OSError:
                    closed = True
                    break
                loris.settimeout(0.02)
                try:
                    if loris.recv(1) == b"":
                        closed = True
                        break
                except TimeoutError:
                    pass
            assert closed, "the trickling client kept its connection"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


def test_a_pipelined_request_longer_than_the_header_timeout_is_answered():
    """Two requests in one write: the second's headers are in before the first answer ends, so no header timer may
    run while the second is served (it closed the connection under it)."""

    async def slow(request):
        await asyncio.sleep(float(request.query_params["s"]))
        return PlainTextResponse(request.query_params["s"])

    app = Starlette(routes=[Route("/", slow)])
    with serve(app, lifespan="off", http=client_timeout_protocol(TIMEOUT_S, DEFAULT_SEND_TIMEOUT_S)) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(b"GET /?s=0.05 HTTP/1.1\r\nHost: x\r\n\r\nGET /?s=1.0 HTTP/1.1\r\nHost: x\r\n\r\n")
            answers = b""
            while answers.count(b"HTTP/1.1 200") < 2 or not answers.endswith(b"1.0"):
                data = client.recv(4096)
                assert data, f"closed after {answers!r}"
                answers += data


BODY_MIN_RATE = 1000
"""Bytes a second a body must average past the timeout's grace, here."""


async def _echo_length(request):
    return PlainTextResponse(str(len(await request.body())))


def _answer_while_trickling(sock: socket.socket, data: bytes, pause_s: float) -> bytes | None:
    """Send `data` a byte every `pause_s`: what the server sent before the end (b"" for a close), else None."""
    for byte in data:
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return b""
        sock.settimeout(pause_s)
        try:
            return sock.recv(4096)
        except TimeoutError:
            pass
    return None


def _answer_ending(sock: socket.socket, end: bytes) -> bytes:
    """What the server sends up to `end` (it must not close before)."""
    answer = b""
    while not answer.endswith(end):
        data = sock.recv(4096)
        assert data, f"closed after {answer!r}"
        answer += data
    return answer


def test_a_body_trickled_under_the_minimum_rate_is_cut_and_one_keeping_it_is_served():
    """A byte every 0.1 s never pauses as long as the timeout (0.5 s): only the body's rate (10 bytes/s, under
    1,000) cuts it, at the grace plus a few milliseconds its bytes earned, with a 408 (it was cut without a word);
    what it sends on is read and dropped until the connection closes, the timeout later. A body sent at ~2,000
    bytes/s in pauses of 0.1 s runs past the timeout twice and is served."""
    app = Starlette(routes=[Route("/", _echo_length, methods=["POST"])])
    protocol = client_timeout_protocol(TIMEOUT_S, DEFAULT_SEND_TIMEOUT_S, body_min_rate=BODY_MIN_RATE)
    with serve(app, lifespan="off", http=protocol) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as trickler:
            trickler.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
            answer = _answer_while_trickling(trickler, b"x" * 60, 0.1)
            assert answer is not None, "a body of 10 bytes/s kept its connection"
            assert answer.startswith(b"HTTP/1.1 408 "), answer
            assert _answer_while_trickling(trickler, b"x" * 200, 0.1) in (b"", None)  # FIN after the answer ...
            assert _answer_while_trickling(trickler, b"x" * 200, 0.1) == b""  # ... then closed, not held
        with socket.create_connection(("127.0.0.1", port), timeout=10) as steady:
            steady.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n")
            for _ in range(10):
                time.sleep(0.1)
                steady.sendall(b"x" * 200)
            assert _answer_ending(steady, b"2000").startswith(b"HTTP/1.1 200")


def test_a_head_past_its_size_bound_is_refused_with_431():
    """uvicorn and httptools bound neither a request target nor a header's length: a head sent without end grew
    the server's memory for as long as the header timeout let it."""
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("ok"))])
    with serve(app, lifespan="off", http=client_timeout_protocol(60, DEFAULT_SEND_TIMEOUT_S)) as url:
        port = int(url.rsplit(":", 1)[1])
        assert head_refusal(port, MAX_HEAD_BYTES) == b"HTTP/1.1 431"  # not lost to a reset: a lingering close
        with socket.create_connection(("127.0.0.1", port), timeout=10) as fitting:
            fitting.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES // 2) + b"\r\n\r\n")
            assert fitting.recv(4096).startswith(b"HTTP/1.1 200")


def test_a_client_waiting_for_100_continue_is_not_cut_while_the_app_has_not_asked_for_the_body():
    """uvicorn sends `100 Continue` when the app first reads the body: an app reading it later than the body
    timeout had the waiting client cut as a stalled body."""

    async def late_reader(request):
        await asyncio.sleep(2 * TIMEOUT_S)
        return PlainTextResponse(str(len(await request.body())))

    app = Starlette(routes=[Route("/", late_reader, methods=["POST"])])
    protocol = client_timeout_protocol(TIMEOUT_S, DEFAULT_SEND_TIMEOUT_S)
    with serve(app, lifespan="off", http=protocol) as url, socket.create_connection(address_of(url), timeout=10) as c:
        c.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
        assert c.recv(4096).startswith(b"HTTP/1.1 100 ")
        c.sendall(b"ab")
        assert c.recv(4096).startswith(b"HTTP/1.1 200 ")


def address_of(url: str) -> tuple[str, int]:
    return "127.0.0.1", int(url.rsplit(":", 1)[1])


def test_a_request_uvicorn_cannot_parse_is_answered_though_the_client_sends_on():
    """uvicorn answers 400 and closed at once: the reset that closing with the client's bytes unread sent destroyed
    the answer before a client still writing could read it."""
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("ok"))])
    with serve(app, lifespan="off", http=client_timeout_protocol(60, DEFAULT_SEND_TIMEOUT_S)) as url:
        answer = answer_while_sending(int(url.rsplit(":", 1)[1]), b"GET / HTTP/1.1\r\nNo Colon\r\n", 1024 * 1024)
        assert answer.startswith(b"HTTP/1.1 400 "), answer


async def _refuse_unread(request):
    return PlainTextResponse("too large", status_code=413)


def test_an_answer_before_the_body_ends_reaches_a_client_still_sending_and_ends_the_connection():
    """An app refusing a body before reading it (a 413 by its Content-Length): the client sends the whole body
    before it reads. Asking for `Connection: close`, uvicorn closed under it (a reset); kept alive, the rest is
    read and dropped, then the connection ends (not kept alive with a body half sent)."""
    app = Starlette(routes=[Route("/", _refuse_unread, methods=["POST"])])
    size = 4 * 1024 * 1024
    with serve(app, lifespan="off", http=client_timeout_protocol(60, DEFAULT_SEND_TIMEOUT_S)) as url:
        port = int(url.rsplit(":", 1)[1])
        for connection in (b"close", b"keep-alive"):
            head = b"POST / HTTP/1.1\r\nHost: x\r\nConnection: %s\r\nContent-Length: %d\r\n\r\n" % (connection, size)
            answer = answer_while_sending(port, head, size)
            assert answer.startswith(b"HTTP/1.1 413 ") and answer.endswith(b"too large"), (connection, answer)
            assert b"\r\nconnection: close\r\n" in answer.lower(), answer  # the client must not reuse it


def test_a_body_split_over_reads_and_answered_after_its_end_keeps_its_connection():
    """A body whose first part came in a read of its own (its answer would have said `connection: close` had it
    begun before the body's end): read whole, then answered, the connection is kept alive and serves the next."""
    app = Starlette(routes=[Route("/", _echo_length, methods=["POST"])])
    with (
        serve(app, lifespan="off", http=client_timeout_protocol(60, DEFAULT_SEND_TIMEOUT_S)) as url,
        socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as client,
    ):
        for _ in range(2):
            client.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n" + b"x" * 1000)
            time.sleep(0.05)  # whether or not the server read the parts apart, the answer is the same
            client.sendall(b"x" * 1000)
            answer = _answer_ending(client, b"2000")
            assert answer.startswith(b"HTTP/1.1 200") and b"connection: close" not in answer.lower(), answer


@pytest.mark.parametrize(
    ("second", "more"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Endless: ", 4 * MAX_HEAD_BYTES + 512 * 1024),
        (b"GET / HTTP/1.1\r\nNo Colon\r\n", 0),
    ],
    ids=["head-past-its-bound", "unparsable"],
)
def test_a_refusal_of_a_request_pipelined_behind_an_answer_is_not_sent_as_that_answer(second, more):
    """A 431 (or uvicorn's 400) was written at once, before or inside the first request's answer: the client took
    it for that answer, and the answer's next write failed after the refusal's FIN. Now such a connection is
    closed."""

    async def slow_stream(request):
        async def parts():
            for _ in range(5):
                await asyncio.sleep(0.1)
                yield b"part "

        return StreamingResponse(parts())

    app = Starlette(routes=[Route("/", slow_stream)])
    with serve(app, lifespan="off", http=client_timeout_protocol(60, DEFAULT_SEND_TIMEOUT_S)) as url:
        answer = answer_while_sending(int(url.rsplit(":", 1)[1]), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + second, more)
        assert answer.count(b"HTTP/1.1 ") <= 1 and b" 431 " not in answer and b" 400 " not in answer, answer


def test_a_pipelined_head_is_counted_from_its_own_start():
    """A read that ends one head and begins the next starts the count again: the two heads together are past the
    bound, each alone is not (the pauses let the server read each write on its own)."""
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("ok"))])
    with serve(app, lifespan="off", http=client_timeout_protocol(60, DEFAULT_SEND_TIMEOUT_S)) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: "
            for part in (head, b"a" * (MAX_HEAD_BYTES * 3 // 4), b"\r\n\r\n" + head + b"a" * (MAX_HEAD_BYTES // 2)):
                client.sendall(part)
                time.sleep(0.05)
            client.sendall(b"\r\n\r\n")
            answers = b""
            while answers.count(b"HTTP/1.1 200") < 2:
                data = client.recv(4096)
                assert data and b" 431 " not in answers, answers
                answers += data


def test_past_the_connections_waiting_for_a_head_the_one_waiting_longest_is_closed():
    """Three connections send nothing where two may wait: the first is closed at once (not at the header timeout,
    60 s here), the others are served, and a connection whose head is in (its 100 Continue came) does not count."""
    app = Starlette(routes=[Route("/", _echo_length, methods=["POST"])])
    protocol = client_timeout_protocol(60, DEFAULT_SEND_TIMEOUT_S, max_waiting_heads=2)
    request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
    with serve(app, lifespan="off", http=protocol) as url, ExitStack() as stack:
        address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
        in_body = stack.enter_context(socket.create_connection(address, timeout=10))
        in_body.sendall(request + b"Expect: 100-continue\r\n\r\n")
        assert in_body.recv(4096).startswith(b"HTTP/1.1 100")
        first, second, third = (stack.enter_context(socket.create_connection(address, timeout=10)) for _ in "abc")
        assert first.recv(1) == b""
        for sock, rest in ((second, request + b"\r\nab"), (third, request + b"\r\nab"), (in_body, b"ab")):
            sock.sendall(rest)
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")


class _Clock:
    """A loop's `time` and `call_at`, by hand: the timers set, and what `advance` fires."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, object]] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback) -> SimpleNamespace:
        self.timers.append((when, callback))
        return SimpleNamespace(cancel=lambda: self.timers.remove((when, callback)))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [t for t in self.timers if t[0] <= self.now]
        self.timers = [t for t in self.timers if t[0] > self.now]
        for _, callback in due:
            callback()


def test_moving_the_read_deadline_sets_no_timer_and_it_still_expires_on_time():
    """A request moves the read deadline several times (headers, body, the next request's headers): one timer serves
    them all, waiting on when it fires before the latest deadline; a deadline cleared expires nothing, and a body's
    deadline passing while the server paused reading starts the body's clock again instead of closing."""
    protocol_class = client_timeout_protocol(TIMEOUT_S, DEFAULT_SEND_TIMEOUT_S)
    protocol = protocol_class.__new__(protocol_class)  # its timers alone: no connection, no uvicorn config
    clock = _Clock()
    closed: list[float] = []
    protocol.loop = clock
    protocol.transport = SimpleNamespace(is_closing=lambda: False, close=lambda: closed.append(clock.now))
    protocol.flow, protocol.cycle = SimpleNamespace(read_paused=False), None
    protocol._read_timer, protocol._in_body, protocol._body_bytes = None, False, 0
    protocol._arm_read(TIMEOUT_S)  # the head's
    clock.advance(0.3)
    protocol._in_body = True
    protocol._arm_read(0.8)  # the body's
    protocol._arm_read(0.8)
    assert len(clock.timers) == 1
    clock.advance(0.3)  # 0.6: the first timer fires before the deadline and waits on
    assert closed == [] and [when for when, _ in clock.timers] == [0.8]
    protocol.flow.read_paused = True
    clock.advance(0.3)
    assert closed == [] and [when for when, _ in clock.timers] == [clock.now + TIMEOUT_S]
    protocol.flow.read_paused = False
    clock.advance(TIMEOUT_S)
    assert len(closed) == 1 and clock.timers == []
    protocol._arm_read(clock.now + TIMEOUT_S)
    protocol._read_deadline = None  # (as a body's end clears it)
    clock.advance(1.0)
    assert len(closed) == 1 and clock.timers == []


def test_the_timers_state_stays_out_of_the_connections_dict():
    """uvicorn's own attributes nearly fill the 30 a CPython 3.11 instance keeps inline; the timers' state in its
    __dict__ would turn that into a plain dict, slower for every attribute read of every callback (~40 K instructions
    a connection, bench/RESULTS.md): it lives in slots, so a served request leaves only uvicorn's attributes."""
    app = Starlette(routes=[Route("/", _echo_length, methods=["POST"])])
    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    config.load()
    request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab"
    protocol_class = client_timeout_protocol(TIMEOUT_S, DEFAULT_SEND_TIMEOUT_S)
    protocol, written = asyncio.run(serve_connection(protocol_class, config, uvicorn.server.ServerState(), request))
    assert written.startswith(b"HTTP/1.1 200") and written.endswith(b"2")
    assert [name for name in vars(protocol) if name.startswith("_")] == []


def test_a_connection_closed_after_its_answer_leaves_no_reference_cycle():
    """A `Connection: close` request's cycle writes through a transport whose close leads back to the protocol: the
    link is dropped once the connection is lost, so nothing is left for the collector (+26 K instructions a
    connection, bench/RESULTS.md)."""
    app = Starlette(routes=[Route("/", _echo_length, methods=["POST"])])
    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    config.load()
    request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab"
    protocol_class = client_timeout_protocol(TIMEOUT_S, DEFAULT_SEND_TIMEOUT_S)

    async def served() -> int:
        gc.collect()
        gc.disable()
        try:
            for _ in range(3):
                _, written = await serve_connection(protocol_class, config, uvicorn.server.ServerState(), request)
                assert written.startswith(b"HTTP/1.1 200")
            return gc.collect()
        finally:
            gc.enable()

    assert asyncio.run(served()) == 0
