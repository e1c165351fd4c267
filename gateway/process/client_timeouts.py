"""Clients that hold a connection without making progress: uvicorn's HTTP protocol with three timers.

- Headers (slow-loris): uvicorn closes idle keep-alive connections, but any byte restarts that timer, so a client
  trickling a header a byte at a time holds its connection (and a slot of --max-concurrency's budget) for ever. This
  timer starts when a connection opens and after each response, and only the end of a request's headers stops it.
- Body: once the headers are in, the body must keep coming: `header_timeout_s` without a byte of it (a
  `Content-Length` larger than what is sent, a chunked body that stops) closes the connection, and the request ends as
  a client that left. Time while the server itself paused reading (the app has not read what came) does not count.
- Sending: a client that stops reading (its TCP window full) while an answer streams would hold the request, its
  backend requests and its tenant's slots for as long as it keeps the socket open: once the socket's write buffer
  is full, `send_timeout_s` without it draining aborts the connection (as nginx's `send_timeout`, 60 s), and the
  request ends as a client that left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_SEND_TIMEOUT_S = 60.0


def client_timeout_protocol(header_timeout_s: float, send_timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing a connection whose request headers take longer than
    `header_timeout_s`, whose body pauses that long, or that takes no bytes of its answer for `send_timeout_s`."""

    class ClientTimeoutProtocol(HttpToolsProtocol):
        _read_timer: asyncio.TimerHandle | None = None
        """Fires at or before the read deadline: the headers', or the body's next bytes'. Moving the deadline later (a
        request's headers, its body, the next request: several times a request) moves no timer; the timer, when it
        fires early, waits on for the rest."""
        _read_deadline: float | None = None
        """Loop time by which the read must make progress (None: no read deadline)."""
        _read_expired: Callable[[], None] | None = None
        """What the read deadline's passing does."""
        _send_timer: asyncio.TimerHandle | None = None
        _in_body = False
        """Between a request's headers and its body's end."""

        def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def,override]
            super().connection_made(transport)
            self._arm_read(self._close)

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._in_body = True
            self._arm_read(self._body_stalled)

        def on_body(self, body: bytes) -> None:
            super().on_body(body)
            if self._in_body:
                self._arm_read(self._body_stalled)

        def on_message_complete(self) -> None:
            if self._in_body:  # (an answer sent before the body ended has armed the next headers' timer instead)
                self._in_body = False
                self._disarm_read()
            super().on_message_complete()

        def on_response_complete(self) -> None:
            pipelined = bool(self.pipeline)  # the next request is in already (and starts now): no headers to wait for
            super().on_response_complete()
            if not self.transport.is_closing() and not pipelined:
                self._in_body = False
                self._arm_read(self._close)  # the next request's headers

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._send_timer is None:
                self._send_timer = self.loop.call_later(send_timeout_s, self._send_stalled)

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_read()
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None
            super().connection_lost(exc)

        def _arm_read(self, expire: Callable[[], None]) -> None:
            self._read_deadline = deadline = self.loop.time() + header_timeout_s
            self._read_expired = expire
            if self._read_timer is None:
                self._read_timer = self.loop.call_at(deadline, self._read_due)

        def _disarm_read(self) -> None:
            self._read_deadline = None  # a timer still pending finds nothing due

        def _read_due(self) -> None:
            deadline, self._read_timer = self._read_deadline, None
            if deadline is None:
                return
            if self.loop.time() < deadline:  # the deadline moved since this timer was set
                self._read_timer = self.loop.call_at(deadline, self._read_due)
                return
            self._read_deadline = None
            self._read_expired()

        def _close(self) -> None:
            if not self.transport.is_closing():
                self.transport.close()

        def _body_stalled(self) -> None:
            if self.flow.read_paused:  # the app has not read what came: the client is not the one stalling
                self._arm_read(self._body_stalled)
            else:
                self._close()

        def _send_stalled(self) -> None:
            self._send_timer = None
            self.transport.abort()  # close() would wait for the full write buffer to drain

    return ClientTimeoutProtocol
