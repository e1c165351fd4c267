"""Server-sent event streams as OpenAI streams them (frames from backends.asgi, shared with the worker)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.api.disconnect import ClientWatch
from gateway.api.front import more_body_send
from gateway.observability.requests import note_client_closed

SSE_HEADERS = [
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
    (b"content-type", b"text/event-stream; charset=utf-8"),
]
"""What Starlette's StreamingResponse sent for these headers and media type, byte for byte."""

BodyWriter = Callable[[Send, Send], Awaitable[None]]
"""Sends a stream's body messages: those with `more_body` true with the first `send` it is given, the last one
(`more_body` false) with the second."""


class SSEResponse(Response):
    """An event stream's answer: the head, then the body `write_body` sends straight to `send` (the loop that reads
    the steps frames and sends them: no async iterator between it and the socket); a client that leaves (seen by
    `watch`, which this answer stops when it ends) ends it quietly, and `events`, what the body reads, is closed
    however it ends. A Response as Starlette's StreamingResponse is one: its own constructor, its own `__call__`."""

    media_type = "text/event-stream"

    def __init__(self, write_body: BodyWriter, events: AsyncIterator[Any], watch: ClientWatch):
        self.write_body = write_body
        self.events = events
        self.watch = watch
        self.status_code = 200
        self.raw_headers = list(SSE_HEADERS)  # its own: `headers` edits it in place

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if not self.watch.left:
                with self.watch:
                    await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
                    # The body from its first wait on in a task of its own: a step wakes that task alone, not every
                    # frame of the server and the middleware above this answer (a client that leaves cancels this
                    # task, and so that one). Its first message goes out here, with the head: a task's first step
                    # would wait a loop iteration, behind every request of a burst that starts in it.
                    rest = started(self.write_body(more_body_send(scope, send), send))
                    if rest is not None:
                        await rest
            if self.watch.left:
                note_client_closed()
        finally:
            self.watch.stop()
            await self.events.aclose()  # type: ignore[attr-defined]


def started(work: Coroutine[Any, Any, None]) -> asyncio.Future[None] | None:
    """`work` run here up to its first wait, and from there on in a task of its own: that task, or None when `work`
    ended without waiting (what it raised so far is raised here)."""
    try:
        waiting = work.send(None)
    except StopIteration:
        return None
    return asyncio.ensure_future(_Rest(work, waiting))


class _Rest:
    """The rest of a coroutine that has run up to its first wait, `waiting` (what it awaits), as an awaitable: what
    the task running it gets or raises is handed on to the coroutine, as `await` does."""

    __slots__ = ("_waiting", "_work")

    def __init__(self, work: Coroutine[Any, Any, None], waiting: Any):
        self._work = work
        self._waiting = waiting

    def __await__(self) -> Generator[Any, Any, None]:
        work, waiting = self._work, self._waiting
        while True:
            try:
                sent, error = (yield waiting), None
            except BaseException as e:  # noqa: BLE001 (a cancellation or a close: the coroutine's to handle)
                sent, error = None, e
            try:
                waiting = work.send(sent) if error is None else work.throw(error)
            except StopIteration:
                return
