"""A request's choices as they stream: backend chunks → detokenized pieces → stop strings; n choices merged."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from typing import TypeVar

from backends.base import Backend, BackendError, GenerateRequest, Grammar, SamplingParams
from backends.detokenizer import Detokenizer
from backends.stop_strings import StopMatcher
from gateway.errors import APIError
from gateway.models.registry import ServedModel
from gateway.observability.tracing import backend_stream
from gateway.types import ChoiceStep, FinishReason
from gateway.validation.fields import GenerationSettings

T = TypeVar("T")


async def choice_steps(
    backend: Backend, request: GenerateRequest, detokenizer: Detokenizer, stops: Sequence[str]
) -> AsyncIterator[ChoiceStep]:
    """Stream one generation; a matched stop string ends it (closing the backend stream aborts the request)."""
    matcher = StopMatcher(stops)
    count = 0
    async with aclosing(backend_stream(backend, request)) as chunks:
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
            step = ChoiceStep(pieces, chunk.logprobs or [], finish, count, chunk.cached_tokens, matcher.matched)
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


def generate(
    model: ServedModel,
    rid: str,
    prompts: Sequence[tuple[list[int], SamplingParams]],
    settings: GenerationSettings,
    grammar: Grammar | None,
    each: Callable[[AsyncIterator[ChoiceStep]], AsyncIterator[ChoiceStep]] | None = None,
) -> AsyncIterator[tuple[int, ChoiceStep]]:
    """Every choice's steps, merged: choice `p * n + j` is sample j of prompt p (seeds differ per sample).
    `each` wraps every choice's stream (a fair queue's slot per choice)."""
    if model.backend is None:
        raise APIError(
            f"the model {model.id!r} only tokenizes; it has no backend", param="model", code="model_not_generative"
        )
    streams = []
    for p, (ids, sampling) in enumerate(prompts):
        for j in range(settings.n):
            request = GenerateRequest(
                rid=f"{rid}-{p * settings.n + j}",
                input_ids=list(ids),
                sampling=sampling if j == 0 else dataclasses.replace(sampling, seed=_nth_seed(sampling.seed, j)),
                grammar=grammar,
                logprobs=settings.logprobs,
                top_logprobs=settings.top_logprobs,
            )
            detokenizer = Detokenizer(model.tokenizer, model.added_ids)
            steps = choice_steps(model.backend, request, detokenizer, settings.stop)
            streams.append(each(steps) if each else steps)
    return merge(streams)


def _nth_seed(seed: int | None, j: int) -> int | None:
    """Sample j's seed (j > 0; the first sample keeps the request's): distinct ones, still in int64."""
    return None if seed is None else (seed + j + (1 << 63)) % (1 << 64) - (1 << 63)
