"""Work that stops when the client goes away: one watcher of the ASGI `http.disconnect` message per answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from types import TracebackType
from typing import Self, TypeVar

from starlette.types import Message, Receive

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client went away before its answer was ready."""


class ClientWatch:
    """One request's client, watched by one task from when its body has been read until `stop()`.

    Inside `with watch:` a client that leaves cancels the task serving the request, and the block ends quietly
    (its CancelledError is swallowed; one from elsewhere, the server stopping, goes on). The work runs in the
    serving task itself: no task per awaited step.
    """

    def __init__(self, receive: Receive):
        self.left = False
        self._serving: asyncio.Task | None = None
        self._cancelled = False
        self._receive = receive
        self._watch()

    def _watch(self) -> None:
        """Wait for the server's next message in a task of its own (the receive itself: no coroutine around it)."""
        self._watcher = watcher = asyncio.get_running_loop().create_task(self._receive())
        watcher.add_done_callback(self._received)

    def _received(self, watcher: asyncio.Future[Message]) -> None:
        if watcher.cancelled():
            return
        if watcher.exception() is None and watcher.result()["type"] != "http.disconnect":
            self._watch()  # not the client leaving (nothing else comes once the body was read): wait on
            return
        self.left = True
        if self._serving is not None:
            self._cancelled = True
            self._serving.cancel()

    def __enter__(self) -> Self:
        self._serving = asyncio.current_task()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        task, self._serving = self._serving, None
        if self._cancelled and kind is not None and issubclass(kind, asyncio.CancelledError):
            self._cancelled = False
            assert task is not None
            task.uncancel()
            return True
        return False

    async def guard(self, work: Awaitable[T]) -> T:
        """Await `work`, cancelling it (and raising ClientDisconnected) if the client disconnects first."""
        if not self.left:
            with self:
                return await work
        elif asyncio.iscoroutine(work):
            work.close()
        raise ClientDisconnected()

    def stop(self) -> None:
        """The answer is over (or will not be given): stop watching."""
        self._watcher.cancel()
