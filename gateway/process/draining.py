"""Graceful shutdown: on SIGTERM /ready turns 503 at once, new requests are still served for `delay`
seconds (while load balancers take this instance out), then the listener closes and in-flight
requests get the server's graceful-shutdown timeout to finish."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import uvicorn


class DrainState:
    """Whether this gateway is shutting down (read by /ready)."""

    def __init__(self) -> None:
        self.draining = False


class DrainingServer(uvicorn.Server):
    """A uvicorn server whose first SIGTERM / SIGINT starts a drain instead of stopping at once."""

    def __init__(self, config: uvicorn.Config, state: DrainState, delay: float):
        super().__init__(config)
        self.state = state
        self.delay = delay
        self._timer: threading.Timer | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.state.draining or self.delay <= 0:
            self.state.draining = True
            super().handle_exit(sig, frame)  # a second signal stops now
            return
        self.state.draining = True
        self._timer = threading.Timer(self.delay, super().handle_exit, (sig, frame))
        self._timer.daemon = True
        self._timer.start()

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's SIGTERM / SIGINT handlers, and SIGHUP ignored: it reloads tenant policies (their watcher sets its
        own handler), and a gateway with none must not die of it, its default action, cutting every stream."""
        with super().capture_signals():
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
            try:
                yield
            finally:
                signal.signal(signal.SIGHUP, previous)

    async def shutdown(self, sockets=None) -> None:  # type: ignore[no-untyped-def]
        if self._timer is not None:
            self._timer.cancel()
        await super().shutdown(sockets)
