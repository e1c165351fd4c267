"""Work that stops when the client goes away: one watcher of the ASGI `http.disconnect` message per answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

from starlette.types import Message, Receive

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client went away before its answer was ready."""


class ClientWatch:
    """One request's client, watched from when its body has been read until `stop()`.

    Inside `with watch:` a client that leaves cancels the task serving the request, and the block ends quietly
    (its CancelledError is swallowed; one from elsewhere, the server stopping, goes on). The work runs in the
    serving task itself: no task per awaited step.

    The server's `receive` is stepped here, as a task would step it, with no task: its first step runs at once (a
    task's would wait for the loop's next turn), each later one as a done callback of what it awaits (a future; a
    bare yield is a `call_soon`), and `stop()` closes it where it waits (a task would be cancelled: a loop step
    that throws CancelledError through the server's receive).
    """

    def __init__(self, receive: Receive):
        self.left = False
        self._serving: asyncio.Task | None = None
        self._cancelled = False
        self._receive = receive
        self._waiting: Coroutine[Any, Any, Message] | None = None
        """The receive in progress (None once it returned the disconnect, failed, or the watch stopped)."""
        self._watch()

    def _watch(self) -> None:
        """Wait for the server's next message."""
        self._waiting = self._receive()  # type: ignore[assignment]
        self._step()

    def _step(self, _: object = None) -> None:
        """Run the receive up to its next wait, or to its message."""
        waiting = self._waiting
        if waiting is None:  # stopped after what it waited for was done, before this callback ran
            return
        try:
            awaited = waiting.send(None)
        except StopIteration as done:
            if done.value["type"] != "http.disconnect":
                self._watch()  # not the client leaving (nothing else comes once the body was read): wait on
                return
            self._leave()
        except Exception:  # noqa: BLE001 (a server whose receive fails has lost its client)
            self._leave()
        else:
            if awaited is None:  # a bare yield: step again on the loop's next turn, as a task would
                asyncio.get_running_loop().call_soon(self._step)
            else:
                awaited.add_done_callback(self._step)

    def _leave(self) -> None:
        self._waiting = None
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
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.close()
