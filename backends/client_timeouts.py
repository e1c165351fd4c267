"""Clients that hold a connection without making progress: uvicorn's HTTP protocol with bounded request heads, timed
bodies and a send timer. The gateway and the bundled worker both serve through it.

- Head (slow-loris): uvicorn closes idle keep-alive connections, but any byte restarts that timer, so a client
  trickling a header a byte at a time holds its connection (and a slot of --max-concurrency's budget) for ever. This
  timer starts when a connection opens and after each response, and only the end of a request's head stops it; the
  connection is then closed without an answer (as nginx's `client_header_timeout` does). A head is also bounded in
  size (`MAX_HEAD_BYTES`: uvicorn and httptools bound neither the target nor a header's length; past it a 431), and
  at most `max_waiting_heads` connections wait for a head at once: past it the one waiting longest is closed (an
  idle keep-alive connection, or a slow head; nginx also closes idle keep-alive connections first when short of
  connections), so slow heads cannot take every descriptor from clients that send theirs at once.
- Body: once the head is in, the body must keep coming: `header_timeout_s` without a byte of it (a `Content-Length`
  larger than what is sent, a chunked body that stops) closes the connection, and so does a body slower on the whole
  than `body_min_rate` bytes a second after a grace of `header_timeout_s` (Apache's mod_reqtimeout `MinRate`): a byte
  every few seconds would otherwise hold the connection and the body's bytes read so far for ever. The request then
  ends as a client that left. Time while the server itself paused reading (the app has not read what came) does not
  count: a deadline passing then starts the body's clock again.
- Sending: a client that stops reading (its TCP window full) while an answer streams would hold the request, its
  backend requests and its tenant's slots for as long as it keeps the socket open: once the socket's write buffer
  is full, `send_timeout_s` without it draining aborts the connection (as nginx's `send_timeout`, 60 s), and the
  request ends as a client that left.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_SEND_TIMEOUT_S = 60.0
DEFAULT_BODY_MIN_RATE = 64 * 1024
"""Bytes a second a body must average (after its grace): 512 kbit/s, below any broadband uplink; a 16 MiB body may
take 256 s and the grace."""
MAX_WAITING_HEADS = 512
"""Connections waiting for a request's head (new, or kept alive after an answer) at once, per server: half of the
usual 1,024 descriptors a process may open."""
MAX_HEAD_BYTES = 64 * 1024
"""A request line and headers longer than this are refused (431; nginx's default is 32 KiB, h11's 16 KiB). The
count is of whole reads inside one head, so a head is cut somewhere below this plus two reads (256 KiB each)."""
_TOO_LARGE_TEXT = f"the request line and headers are over {MAX_HEAD_BYTES // 1024} KiB\n".encode()
_HEAD_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_TOO_LARGE_TEXT), _TOO_LARGE_TEXT)
)


def client_timeout_protocol(
    header_timeout_s: float,
    send_timeout_s: float | None,
    body_min_rate: float = DEFAULT_BODY_MIN_RATE,
    max_waiting_heads: int = MAX_WAITING_HEADS,
) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing a connection whose request head takes longer than `header_timeout_s`,
    whose body pauses that long or averages under `body_min_rate` bytes a second past that grace, or that takes no
    bytes of its answer for `send_timeout_s` (None: no send timer); past `max_waiting_heads` connections waiting for
    a head, the one waiting longest."""
    waiting: dict[ClientTimeoutProtocol, None] = {}
    """The connections waiting for a request's head, longest first (a dict keeps its order)."""

    class ClientTimeoutProtocol(HttpToolsProtocol):
        # Slots, each set in `connection_made`, not class defaults: uvicorn's own 28 attributes nearly fill the 30
        # an instance keeps inline (its type's shared keys); more in its __dict__ made that a plain dict, slower to
        # read for every attribute of the connection. uvicorn's methods are called by name, not through super(),
        # which builds an object each call (a request's callbacks run a dozen times).
        __slots__ = (
            "_body_bytes",
            "_body_clock",
            "_head_bytes",
            "_head_open",
            "_heads_ended",
            "_in_body",
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

        def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def,override]
            HttpToolsProtocol.connection_made(self, transport)
            self._read_timer = self._read_deadline = self._send_timer = None
            self._in_body = self._head_open = False
            self._body_clock, self._body_bytes, self._head_bytes, self._heads_ended = 0.0, 0, 0, 0
            self._await_head()

        def data_received(self, data: bytes) -> None:
            if not self._head_open:  # a read beginning outside a head counts for none (most reads)
                HttpToolsProtocol.data_received(self, data)
                return
            ended = self._heads_ended
            HttpToolsProtocol.data_received(self, data)
            if self._head_open and self._heads_ended == ended:  # began and ended inside one head
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                    self.transport.write(_HEAD_TOO_LARGE)
                    self.transport.close()

        def on_message_begin(self) -> None:
            HttpToolsProtocol.on_message_begin(self)
            self._head_open = True
            self._head_bytes = 0

        def on_headers_complete(self) -> None:
            self._head_open = False
            self._heads_ended += 1
            waiting.pop(self, None)
            HttpToolsProtocol.on_headers_complete(self)
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
            HttpToolsProtocol.on_message_complete(self)

        def on_response_complete(self) -> None:
            pipelined = bool(self.pipeline)  # the next request is in already (and starts now): no head to wait for
            HttpToolsProtocol.on_response_complete(self)
            if not pipelined and not self.transport.is_closing():
                self._in_body = False
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

        def _body_stalled(self) -> None:
            if self.flow.read_paused:  # the app has not read what came: the client is not the one stalling
                now = self.loop.time()
                self._body_clock = now - self._body_bytes / body_min_rate
                self._arm_read(now + header_timeout_s)
            else:
                self._close()

        def _send_stalled(self) -> None:
            self._send_timer = None
            self.transport.abort()  # close() would wait for the full write buffer to drain

    return ClientTimeoutProtocol
