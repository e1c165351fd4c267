"""Clients that hold a connection without making progress: uvicorn's HTTP protocol with bounded request heads, timed
bodies and a send timer. The gateway and the bundled worker both serve through it.

- Head (slow-loris): uvicorn closes idle keep-alive connections, but any byte restarts that timer, so a client
  trickling a header a byte at a time holds its connection (and a slot of --max-concurrency's budget) for ever. This
  timer starts when a connection opens and after each response, and only the end of a request's head stops it; the
  connection is then closed without an answer (as nginx's `client_header_timeout` does). A head is also bounded in
  size (`MAX_HEAD_BYTES`: uvicorn and httptools bound neither the target nor a header's length; past it a 431), and
  at most `max_waiting_heads` connections wait for a head at once (lingering ones, below, count too): past it the
  one waiting longest is closed (an idle keep-alive connection, or a slow head; nginx also closes idle keep-alive
  connections first when short of connections), so slow heads cannot take every descriptor from clients that send
  theirs at once.
- Body: once the head is in, the body must keep coming: `header_timeout_s` without a byte of it (a `Content-Length`
  larger than what is sent, a chunked body that stops) cuts the request, and so does a body slower on the whole
  than `body_min_rate` bytes a second after a grace of `header_timeout_s` (Apache's mod_reqtimeout `MinRate`): a byte
  every few seconds would otherwise hold the connection and the body's bytes read so far for ever. The client gets a
  408 (as from mod_reqtimeout) unless its answer had begun, and the app's request ends as a client that left, its
  scope marked `BODY_TIMED_OUT` (the app's body read raises `BodyTimedOut`: its records say 408). Time
  while the server itself paused reading (the app has not read what came) does not count: a deadline passing then
  starts the body's clock again.
- Lingering close: an answer given while the client is still sending (a 431, uvicorn's 400 for a request it cannot
  parse, a 408, an app's 413 or other answer before the body ended) must not be followed by a plain close: closing
  a socket with unread bytes sends a reset, and a client still writing its request then loses the answer before it
  reads it. So the answer is followed by a FIN, and what the client still sends is read and dropped, for at most
  `header_timeout_s` and `LINGER_BYTES`, until it closes its side (nginx's `lingering_close`); the connection is
  not kept alive.
- Sending: a client that stops reading (its TCP window full) while an answer streams would hold the request, its
  backend requests and its tenant's slots for as long as it keeps the socket open: once the socket's write buffer
  is full, `send_timeout_s` without it draining aborts the connection (as nginx's `send_timeout`, 60 s), and the
  request ends as a client that left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from backends.asgi import BODY_TIMED_OUT

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_SEND_TIMEOUT_S = 60.0
DEFAULT_BODY_MIN_RATE = 64 * 1024
"""Bytes a second a body must average (after its grace): 512 kbit/s, below any broadband uplink; a 16 MiB body may
take 256 s and the grace."""
DEFAULT_MAX_WAITING_HEADS = 512
"""Connections waiting for a request's head (new, or kept alive after an answer) at once, per server: half of the
usual 1,024 descriptors a process may open."""
LINGER_BYTES = 128 * 1024 * 1024
"""Bytes read and dropped after an answer given while the client was still sending: twice the largest body a server
here takes (the worker refuses one declared past its 64 MiB before reading it, and the client still sends it all);
past them the connection closes at once."""
MAX_HEAD_BYTES = 64 * 1024
"""A request line and headers longer than this are refused (431; nginx's default is 32 KiB, h11's 16 KiB). The
count is of whole reads inside one head, so a head is cut somewhere below this plus two reads (256 KiB each)."""


def plain_answer(status: str, text: str) -> bytes:
    """A whole HTTP/1.1 answer with a plain-text body, closing the connection."""
    body = text.encode()
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


_HEAD_TOO_LARGE = plain_answer(
    "431 Request Header Fields Too Large", f"the request line and headers are over {MAX_HEAD_BYTES // 1024} KiB\n"
)


class _CloseLingers:
    """A transport as uvicorn's code that closes after an answer sees it: the same writes, and `close` in place of
    its close (a lingering one where the client may still be sending)."""

    def __init__(self, transport: asyncio.Transport, close: Callable[[], None]):
        self.write, self.is_closing, self.close = transport.write, transport.is_closing, close


def client_timeout_protocol(
    header_timeout_s: float,
    send_timeout_s: float | None,
    body_min_rate: float = DEFAULT_BODY_MIN_RATE,
    max_waiting_heads: int = DEFAULT_MAX_WAITING_HEADS,
) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing a connection whose request head takes longer than `header_timeout_s`,
    whose body pauses that long or averages under `body_min_rate` bytes a second past that grace (a 408), or that
    takes no bytes of its answer for `send_timeout_s` (None: no send timer); past `max_waiting_heads` connections
    waiting for a head, the one waiting longest. An answer given while the client is still sending is followed by
    a lingering close."""
    waiting: dict[ClientTimeoutProtocol, None] = {}
    """The connections waiting for a request's head (or lingering), longest first (a dict keeps its order)."""
    body_too_slow = plain_answer(
        "408 Request Timeout",
        f"the request body paused for {header_timeout_s:g} s or came slower than {body_min_rate:g} bytes a second\n",
    )

    class ClientTimeoutProtocol(HttpToolsProtocol):
        # Slots, each set in `connection_made`, not class defaults: uvicorn's own 28 attributes nearly fill the 30
        # an instance keeps inline (its type's shared keys); more in its __dict__ made that a plain dict, slower to
        # read for every attribute of the connection. uvicorn's methods are called by name, not through super(),
        # which builds an object each call (a request's callbacks run a dozen times).
        __slots__ = (
            "_body_bytes",
            "_body_clock",
            "_closes_early",
            "_head_bytes",
            "_head_open",
            "_heads_ended",
            "_in_body",
            "_lingered",
            "_lingering",
            "_read_deadline",
            "_read_timer",
            "_send_timer",
        )
        _read_timer: asyncio.TimerHandle | None
        """Fires at or before the read deadline: the head's, or the body's. Moving the deadline later (a request's
        head, its body's bytes, the next request: several times a request) moves no timer; the timer, when it fires
        early, waits on for the rest."""
        _read_deadline: float | None
        """Loop time by which the read must make progress (None: no read deadline); its passing closes the
        connection, or inside a body checks the body's stall (`_body_stalled`)."""
        _send_timer: asyncio.TimerHandle | None
        _in_body: bool
        """Between a request's head and its body's end."""
        _body_clock: float
        """Loop time the body's rate is counted from."""
        _body_bytes: int
        _head_open: bool
        """A request's head has begun and not ended."""
        _head_bytes: int
        """Bytes of the reads that began and ended inside the open head."""
        _heads_ended: int
        """Request heads this connection has read to their end."""
        _lingering: bool
        """An answer went out while the client was still sending: what it sends now is read and dropped."""
        _lingered: int
        """Bytes read and dropped since."""
        _closes_early: bool
        """A read ended inside a kept-alive request's body: an answer begun before the body's end says `connection:
        close` (`_closes_if_answered_early`), until the body ends unanswered."""

        def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def,override]
            HttpToolsProtocol.connection_made(self, transport)
            self._read_timer = self._read_deadline = self._send_timer = None
            self._in_body = self._head_open = self._lingering = self._closes_early = False
            self._lingered = 0
            self._body_clock, self._body_bytes, self._head_bytes, self._heads_ended = 0.0, 0, 0, 0
            self._await_head()

        def data_received(self, data: bytes) -> None:
            if self._lingering:
                self._lingered += len(data)
                if self._lingered > LINGER_BYTES:
                    self._close()
                return
            if not self._head_open:  # a read beginning outside a head counts for none (most reads)
                HttpToolsProtocol.data_received(self, data)
                if self._in_body and not self._closes_early:
                    self._closes_if_answered_early()
                return
            ended = self._heads_ended
            HttpToolsProtocol.data_received(self, data)
            if self._lingering:  # uvicorn answered 400: a request it cannot parse
                return
            if self._in_body and not self._closes_early:
                self._closes_if_answered_early()
            if self._head_open and self._heads_ended == ended:  # began and ended inside one head
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                    if self._answering():
                        self._close()
                    else:
                        self._refuse(_HEAD_TOO_LARGE)

        def _answering(self) -> bool:
            """An earlier request's answer is still due: a refusal of the next, pipelined one would be read as it."""
            return self.cycle is not None and not self.cycle.response_complete

        def send_400_response(self, msg: str) -> None:
            if self._answering():
                self._close()
                return
            transport, self.transport = self.transport, _CloseLingers(self.transport, lambda: None)
            try:
                HttpToolsProtocol.send_400_response(self, msg)  # its answer, and no close: a lingering one
            finally:
                self.transport = transport
            self._linger()

        def on_message_begin(self) -> None:
            HttpToolsProtocol.on_message_begin(self)
            self._head_open = True
            self._head_bytes = 0

        def on_headers_complete(self) -> None:
            self._head_open = False
            self._heads_ended += 1
            waiting.pop(self, None)
            HttpToolsProtocol.on_headers_complete(self)
            cycle = self.cycle
            if cycle is not None and cycle.scope is self.scope and not cycle.keep_alive:  # closed after its answer
                cycle.transport = _CloseLingers(self.transport, self._close_answered)
            self._in_body = True
            self._body_clock = now = self.loop.time()
            self._body_bytes = 0
            self._arm_read(now + header_timeout_s)

        def on_body(self, body: bytes) -> None:
            HttpToolsProtocol.on_body(self, body)
            if self._in_body:  # due within the timeout from now, or from the time its bytes earned if earlier
                self._body_bytes += len(body)
                earned = self._body_clock + self._body_bytes / body_min_rate
                self._arm_read(min(self.loop.time(), earned) + header_timeout_s)

        def on_message_complete(self) -> None:
            if self._in_body:  # (an answer sent before the body ended has armed the next head's timer instead)
                self._in_body = False
                self._read_deadline = None  # a timer still pending finds nothing due
                if self._closes_early:
                    self._closes_early = False
                    cycle = self.cycle
                    if cycle is not None and not cycle.response_started:  # unanswered yet: kept alive after all
                        cycle.keep_alive, cycle.transport = True, self.transport
            HttpToolsProtocol.on_message_complete(self)

        def _closes_if_answered_early(self) -> None:
            """A read ended inside a kept-alive request's body: an answer the app begins before the body's end (a
            401 from the head alone) is not kept alive (`on_response_complete`), so it must say `connection:
            close`: a client reusing the connection at once sent its next request into the close (httpx: "Server
            disconnected without sending a response"). Undone when the body ends before the answer begins."""
            cycle = self.cycle
            if cycle is not None and cycle.scope is self.scope and cycle.keep_alive and not cycle.response_started:
                self._closes_early = True
                cycle.keep_alive = False
                cycle.transport = _CloseLingers(self.transport, self._close_answered)

        def on_response_complete(self) -> None:
            pipelined = bool(self.pipeline)  # the next request is in already (and starts now): no head to wait for
            HttpToolsProtocol.on_response_complete(self)
            if self.transport.is_closing() or pipelined:
                return
            if self._in_body or self._lingering:  # answered before its body ended: not kept alive
                self._linger()
            else:
                self._await_head()  # the next request's

        def pause_writing(self) -> None:
            HttpToolsProtocol.pause_writing(self)
            if self._send_timer is None and send_timeout_s is not None:
                self._send_timer = self.loop.call_later(send_timeout_s, self._send_stalled)

        def resume_writing(self) -> None:
            HttpToolsProtocol.resume_writing(self)
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None

        def connection_lost(self, exc: Exception | None) -> None:
            waiting.pop(self, None)
            self._read_deadline = None
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None
            HttpToolsProtocol.connection_lost(self, exc)
            cycle = self.cycle
            if cycle is not None:  # its _CloseLingers leads back here: a cycle the collector would have to find
                cycle.transport = self.transport

        def _await_head(self) -> None:
            """A request's head is due within `header_timeout_s`; past `max_waiting_heads` connections waiting for
            one, the one waiting longest is closed."""
            self._arm_read(self.loop.time() + header_timeout_s)
            waiting[self] = None
            if len(waiting) > max_waiting_heads:
                longest = next(iter(waiting))
                del waiting[longest]
                longest._close()

        def _arm_read(self, deadline: float) -> None:
            """Read progress due by loop time `deadline`."""
            self._read_deadline = deadline
            if self._read_timer is None:
                self._read_timer = self.loop.call_at(deadline, self._read_due)

        def _read_due(self) -> None:
            deadline, self._read_timer = self._read_deadline, None
            if deadline is None:
                return
            if self.loop.time() < deadline:  # the deadline moved since this timer was set
                self._read_timer = self.loop.call_at(deadline, self._read_due)
                return
            self._read_deadline = None
            if self._in_body:
                self._body_stalled()
            else:
                self._close()

        def _close(self) -> None:
            if not self.transport.is_closing():
                self.transport.close()

        def _refuse(self, answer: bytes) -> None:
            self.transport.write(answer)
            self._linger()

        def _close_answered(self) -> None:
            """uvicorn's close once a request's answer is sent (the client asked for it): lingering while the
            request's body is still coming."""
            if self._in_body:
                self._linger()
            else:
                self.transport.close()

        def _linger(self) -> None:
            """Once the answer is written, a FIN; what the client still sends is dropped until it closes, for at
            most `header_timeout_s` and LINGER_BYTES (the connection waits as a head does)."""
            self._unset_keepalive_if_required()
            if self._lingering or self.transport.is_closing():
                return
            self._lingering, self._in_body = True, False
            if self.transport.can_write_eof():  # (TCP; not TLS) asyncio and uvloop send it once their buffer is out
                self.transport.write_eof()
            self.flow.resume_reading()
            self._await_head()

        def _body_stalled(self) -> None:
            cycle = self.cycle
            if self.flow.read_paused or (cycle is not None and cycle.waiting_for_100_continue):
                # the app has not read what came, or not yet asked for the body: the client is not the one stalling
                now = self.loop.time()
                self._body_clock = now - self._body_bytes / body_min_rate
                self._arm_read(now + header_timeout_s)
            elif cycle is not None and not cycle.response_started:
                cycle.scope[BODY_TIMED_OUT] = True  # so the app's logs and metrics say 408, not a client that left
                cycle.disconnected = True  # the app's next receive() says the client left; its answer is dropped
                cycle.message_event.set()
                self._refuse(body_too_slow)
            else:
                self._close()

        def _send_stalled(self) -> None:
            self._send_timer = None
            self.transport.abort()  # close() would wait for the full write buffer to drain

    return ClientTimeoutProtocol
