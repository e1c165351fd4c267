"""Answering from merged choice steps: an SSE stream of events, or the same events folded into one body.

A `Door` is one endpoint's wire format (chat chunks, Responses events, Anthropic events); `respond_door`
streams or folds any door the same way, and `respond` is the chat / completions door over a `Renderer`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from contextlib import aclosing
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Send

from backends.asgi import DONE_FRAME, dumps, json_response, sse_frame
from backends.base import BackendError
from gateway.api.disconnect import ClientDisconnected, ClientWatch
from gateway.api.sse import SSEResponse
from gateway.errors import CLIENT_CLOSED, APIError, from_backend
from gateway.observability.requests import note_error, note_usage, step_notes
from gateway.observability.tracing import traced_door
from gateway.types import ChoiceStep, Events
from gateway.validation.fields import GenerationSettings

log = logging.getLogger(__name__)


class Door(Protocol):
    """One endpoint's events: what it sends before, during and after the output, how they frame and fold."""

    end: bytes
    """What closes the stream (chat's `[DONE]`; nothing for event-typed streams)."""

    def opening(self) -> list[Any]:
        """Events before any output."""

    def step(self, index: int, step: ChoiceStep) -> list[Any]:
        """Events for one step of choice `index`."""

    async def closing(self) -> list[Any]:
        """Events after the last step (for a stored response, once it is stored)."""

    def fold(self, events: list[Any]) -> Any:
        """The non-stream body: every event, folded."""

    def frame(self, item: Any) -> bytes:
        """One event as SSE bytes."""

    async def failure(self, error: APIError) -> bytes:
        """The events that report a failure after the stream started (for a stored response, once it is stored)."""

    def usage(self) -> dict[str, Any]:
        """Token totals so far, in chat's `usage` shape (for metrics and the access log)."""


async def respond_door(request: Request, events: Events, door: Door, stream: bool) -> Response:
    """Stream (SSE) or fold `events`; a client that disconnects cancels its backend requests."""
    note = step_notes()
    door = traced_door(door)
    watch = ClientWatch(request.receive)
    answer = None
    try:
        if not stream:
            body = door.fold(await watch.guard(_collect(events, door, note)))
            note_usage(door.usage())
            return json_response(body)
        # Wait for the first output so that a backend that is down or refuses gets a real HTTP status.
        first = await watch.guard(anext(events, None))
        if first is not None:
            note(first[1])
        # it stops the watch when it ends
        answer = SSEResponse(functools.partial(_stream, first, events, door, note), events, watch)
        return answer
    except ClientDisconnected:
        return Response(status_code=CLIENT_CLOSED)
    except BackendError as e:
        raise from_backend(e) from None
    finally:
        if answer is None:
            watch.stop()


async def _collect(events: Events, door: Door, note: Callable[[ChoiceStep], None]) -> list[Any]:
    out = door.opening()
    async with aclosing(events):
        async for index, step in events:
            note(step)
            out += door.step(index, step)
    return out + await door.closing()


async def _stream(
    first: tuple[int, ChoiceStep] | None,
    events: Events,
    door: Door,
    note: Callable[[ChoiceStep], None],
    send_more: Send,
    send: Send,
) -> None:
    """The SSE body: one body message per backend step (the opening goes with the first step; the closing, `[DONE]`
    and the body's end with the last), so a step's frames leave together and a short answer costs two writes. The
    first message is sent at once, in the caller's own step right after the head (in a burst, a task started for it
    would send the first token only after whatever else the loop has ready); the steps after it, and the end, are
    sent by `_rest` in a task of its own (a step wakes that task alone, not the server's and middleware's frames above
    the answer; a cancelled answer cancels it), unless the first step ended its choice."""
    frames: list[bytes] = []
    error: BaseException | None = None
    try:
        frames = [door.frame(item) for item in door.opening()]
        if first is not None:
            for item in door.step(*first):
                frames.append(door.frame(item))
            if frames:
                await send_more({"type": "http.response.body", "body": b"".join(frames), "more_body": True})
                frames.clear()
    except BaseException as e:  # noqa: BLE001 (answered, or raised on, by `_rest` as it answers its own)
        error = e
    rest = _rest(events, door, note, send_more, send, frames, error, more=first is not None)
    # A first step that ended its choice (a one-token answer, or a whole answer in one read) leaves nothing to wait
    # for but the end (of one choice): read here, as a task would cost a loop turn and more than the rest itself.
    waits = first is not None and error is None and first[1].finish_reason is None
    await (asyncio.ensure_future(rest) if waits else rest)


async def _rest(
    events: Events,
    door: Door,
    note: Callable[[ChoiceStep], None],
    send_more: Send,
    send: Send,
    frames: list[bytes],
    error: BaseException | None,
    more: bool,
) -> None:
    """After the first message: the next steps (when `more`), each framed and sent as one body message, then the
    closing, `[DONE]` and the body's end (what `frames` holds goes first); an `error` of the first message, or of
    these, ends the stream with its error event (a client's broken connection, or a cancellation, is raised on)."""
    ending = b""
    frame, step, next_step = door.frame, door.step, events.__anext__  # looked up once, not per step
    try:
        if error is not None:
            raise error
        while more:
            try:  # `__anext__` awaited as it is: `anext(events, None)` would wrap every step in an awaitable of its own
                current = await next_step()
            except StopAsyncIteration:
                break
            note(current[1])
            for item in step(*current):
                frames.append(frame(item))
            if frames:
                await send_more({"type": "http.response.body", "body": b"".join(frames), "more_body": True})
                frames.clear()
        ending = b"".join([*frames, *(frame(item) for item in await door.closing())])
    except OSError:
        raise  # the client's connection failed, not the answer
    except BackendError as e:
        ending = b"".join(frames) + await _failure(door, from_backend(e))
    except APIError as e:  # e.g. the response store is down when the stream ends
        ending = b"".join(frames) + await _failure(door, e)
    except Exception:
        log.exception("stream failed")
        failure = APIError("internal error while streaming", status=500, type="server_error")
        ending = b"".join(frames) + await _failure(door, failure)
    finally:
        await events.aclose()
        note_usage(door.usage())
    await send({"type": "http.response.body", "body": ending + door.end, "more_body": False})


async def _failure(door: Door, error: APIError) -> bytes:
    """The frames of an error that ends a stream after its 200, noted for the access line."""
    note_error(error.code or error.type)
    return await door.failure(error)


class Renderer(Protocol):
    """One endpoint's view of choice steps: the chunk choices it streams and how they fold."""

    def opening(self) -> list[dict[str, Any]]:
        """Chunk choices sent before any output."""

    def step(self, index: int, step: ChoiceStep) -> list[dict[str, Any]]:
        """Chunk choices for one step of choice `index`."""

    def fold(self, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The non-stream `choices`: every chunk choice, merged per index."""

    def usage(self) -> dict[str, Any]:
        """Totals over all choices so far."""

    def choice_usage(self, index: int) -> dict[str, Any]:
        """Choice `index`'s own usage so far: its prompt and its tokens (vLLM's continuous_usage_stats)."""


async def respond(
    request: Request,
    events: Events,
    renderer: Renderer,
    envelope: dict[str, Any],
    settings: GenerationSettings,
    final_object: str,
) -> Response:
    """Chat / completions chunks: each chunk choice in the envelope; `[DONE]` at the end."""
    door = _ChunkDoor(
        renderer, envelope, settings.stream and settings.include_usage, final_object, settings.continuous_usage
    )
    return await respond_door(request, events, door, settings.stream)


class _ChunkDoor:
    """Chunk choices framed as `chat.completion.chunk` / `text_completion` events."""

    end = DONE_FRAME
    _USAGE = None
    """The closing event that carries usage (streams with include_usage only)."""

    def __init__(
        self,
        renderer: Renderer,
        envelope: dict[str, Any],
        include_usage: bool,
        final_object: str,
        continuous_usage: bool = False,
    ):
        self._renderer = renderer
        self.step = renderer.step  # the renderer's own, called per step with no call of ours around it
        self._envelope = envelope
        self._include_usage = include_usage
        self._continuous_usage = include_usage and continuous_usage
        self._final_object = final_object
        self._head: bytes | None = None
        self._tail = b""

    def opening(self) -> list[Any]:
        return self._renderer.opening()

    async def closing(self) -> list[Any]:
        return [self._USAGE] if self._include_usage else []

    def fold(self, events: list[Any]) -> dict[str, Any]:
        choices = self._renderer.fold([e for e in events if e is not self._USAGE])
        return {**self._envelope, "object": self._final_object, "choices": choices, "usage": self._renderer.usage()}

    def frame(self, item: Any) -> bytes:
        if item is self._USAGE:
            return sse_frame({**self._envelope, "choices": [], "usage": self._renderer.usage()})
        if self._continuous_usage:  # vLLM's continuous_usage_stats: each chunk carries its choice's usage so far
            return sse_frame({**self._envelope, "choices": [item], "usage": self._renderer.choice_usage(item["index"])})
        if self._head is None:  # the envelope's bytes, encoded once: `{...envelope,"choices":[` and `],"usage":null}`
            self._head, self._tail = _chunk_frame_ends(self._envelope, self._include_usage)
        return self._head + dumps(item) + self._tail

    async def failure(self, error: APIError) -> bytes:
        log.warning("stream %s failed: %s", self._envelope.get("id"), error.message)
        return sse_frame(error.body())

    def usage(self) -> dict[str, Any]:
        return self._renderer.usage()


def _chunk_frame_ends(envelope: dict[str, Any], include_usage: bool) -> tuple[bytes, bytes]:
    """What goes before and after one chunk choice's JSON in its frame: byte for byte what
    `sse_frame({**envelope, "choices": [choice], "usage": None})` writes (the usage key only with `include_usage`)."""
    marker = sse_frame({**envelope, "choices": [0], **({"usage": None} if include_usage else {})})
    head, tail = marker.split(b'"choices":[0]')
    return head + b'"choices":[', b"]" + tail
