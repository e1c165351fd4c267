"""Engine-thread events handed to the event loop with one wake-up per batch of events, not one per event."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from typing import Any


class LoopMailbox:
    """Posts from any thread, delivered in order on `loop`.

    A decode step of n rows posts n events; the loop is woken (a `call_soon_threadsafe`, one write to its
    self-pipe) only by the first post that finds no delivery already scheduled, and delivers them all at once."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.wakeups = 0
        self._pending: deque[tuple[Callable[[Any], None], Any]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False

    def post(self, deliver: Callable[[Any], None], item: Any) -> None:
        """Have `deliver(item)` called on the loop; never blocks."""
        with self._lock:
            self._pending.append((deliver, item))
            if self._scheduled:
                return
            self._scheduled = True
            self.wakeups += 1
        self.loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, deque()
            self._scheduled = False
        for deliver, item in batch:
            deliver(item)
