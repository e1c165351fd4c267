"""One choice's output as it streams: backend chunks → detokenized pieces → stop strings; n choices merged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from starlette.requests import Request

from backends.base import Backend, BackendError, GenerateRequest, TokenLogprob
from gateway.detokenizer import Detokenizer
from gateway.families.base import Piece
from gateway.stop_strings import StopMatcher

T = TypeVar("T")
FinishReason = Literal["stop", "length"]


@dataclass
class ChoiceStep:
    """What one backend chunk added to a choice; `finish_reason` is set on its last step."""

    pieces: list[Piece]
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    completion_tokens: int = 0
    """Output tokens so far (the backend's, a stop token included)."""
    cached_tokens: int = 0


async def choice_steps(
    backend: Backend, request: GenerateRequest, detokenizer: Detokenizer, stops: Sequence[str]
) -> AsyncIterator[ChoiceStep]:
    """Stream one generation; a matched stop string ends it (closing the backend stream aborts the request)."""
    matcher = StopMatcher(stops)
    count = 0
    async with aclosing(backend.generate(request)) as chunks:
        async for chunk in chunks:
            ids = chunk.output_ids
            count += len(ids)
            if chunk.finish_reason == "abort":
                raise BackendError("the backend aborted the request", retryable=True)
            if chunk.finish_reason == "stop" and ids and ids[-1] == chunk.matched_stop:
                ids = ids[:-1]  # the stop token ends the turn; it is not output text
            pieces = matcher.feed(detokenizer.feed(ids))
            finish: FinishReason | None = chunk.finish_reason
            if finish is not None and matcher.matched is None:
                pieces += matcher.feed(detokenizer.flush())
                pieces += matcher.flush()
            if matcher.matched is not None:
                finish = "stop"
            step = ChoiceStep(pieces, chunk.logprobs or [], finish, count, chunk.cached_tokens)
            if step.pieces or step.logprobs or finish is not None:
                yield step
            if finish is not None:
                return
    raise BackendError("the backend stream ended without a finish reason", retryable=True)


_END = object()


async def merge(streams: Sequence[AsyncIterator[T]], buffer: int = 16) -> AsyncIterator[tuple[int, T]]:
    """Items of all `streams` as they come, tagged with their stream's index.

    The first failure is raised here and the other streams are cancelled;
    closing this iterator early cancels (and so closes) every stream.
    """
    if len(streams) == 1:  # the common case needs no queue and no task
        async with aclosing(streams[0]) as only:
            async for item in only:
                yield 0, item
        return
    queue: asyncio.Queue[tuple[int, object]] = asyncio.Queue(maxsize=buffer)

    async def pump(index: int, stream: AsyncIterator[T]) -> None:
        try:
            async with aclosing(stream):
                async for item in stream:
                    await queue.put((index, item))
            await queue.put((index, _END))
        except Exception as e:  # noqa: BLE001 - handed to the consumer, who raises it
            await queue.put((index, e))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            index, item = await queue.get()
            if item is _END:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item  # type: ignore[misc]
    finally:
        for task in tasks:
            task.cancel()


class ClientDisconnected(Exception):
    """The client went away before its answer was ready."""


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it (and raising ClientDisconnected) if the client disconnects first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.create_task(_disconnect(request))
    try:
        done, _ = await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    raise ClientDisconnected()


async def _disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
