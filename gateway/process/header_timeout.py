"""A request's headers must arrive within a deadline (slow-loris): uvicorn's HTTP protocol with a header timer.

uvicorn closes idle keep-alive connections, but any byte restarts that timer, so a client trickling a header a
byte at a time holds its connection (and a slot of --max-concurrency's budget) for ever. This timer starts when a
connection opens and after each response, and only the end of a request's headers stops it.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

DEFAULT_HEADER_TIMEOUT_S = 10.0


def header_timeout_protocol(seconds: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing a connection whose request headers take longer than `seconds`."""

    class HeaderTimeoutProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def,override]
            super().connection_made(transport)
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's headers

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(seconds, self._expire)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expire(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutProtocol
