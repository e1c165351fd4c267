"""Answering from merged choice steps: an SSE stream of chunks, or the same chunks folded into one body."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response

from backends.base import BackendError
from gateway.api.disconnect import ClientDisconnected, unless_disconnected
from gateway.api.json_response import json_response
from gateway.api.sse import DONE, event, sse_response
from gateway.errors import APIError, from_backend
from gateway.observability.requests import note_usage, observed_steps
from gateway.types import ChoiceStep
from gateway.validation.fields import GenerationSettings

log = logging.getLogger(__name__)

Events = AsyncIterator[tuple[int, ChoiceStep]]
CLIENT_CLOSED = 499
"""nginx's status for a client that left; nobody reads it, it only shows in logs."""


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


async def respond(
    request: Request,
    events: Events,
    renderer: Renderer,
    envelope: dict[str, Any],
    settings: GenerationSettings,
    final_object: str,
) -> Response:
    """Stream (SSE) or fold `events`; a client that disconnects cancels its backend requests."""
    events = observed_steps(events)
    try:
        if not settings.stream:
            chunks = await unless_disconnected(request, _collect(events, renderer))
            note_usage(renderer.usage())
            body = {**envelope, "object": final_object, "choices": renderer.fold(chunks), "usage": renderer.usage()}
            return json_response(body)
        # Wait for the first output so that a backend that is down or refuses gets a real HTTP status.
        first = await unless_disconnected(request, anext(events, None))
    except ClientDisconnected:
        return Response(status_code=CLIENT_CLOSED)
    except BackendError as e:
        raise from_backend(e) from None
    return sse_response(_stream(first, events, renderer, envelope, settings.include_usage))


async def _collect(events: Events, renderer: Renderer) -> list[dict[str, Any]]:
    chunks = renderer.opening()
    async with aclosing(events):
        async for index, step in events:
            chunks += renderer.step(index, step)
    return chunks


async def _stream(
    first: tuple[int, ChoiceStep] | None,
    events: Events,
    renderer: Renderer,
    envelope: dict[str, Any],
    include_usage: bool,
) -> AsyncIterator[bytes]:
    usage_field = {"usage": None} if include_usage else {}
    try:
        for choice in renderer.opening():
            yield event({**envelope, "choices": [choice], **usage_field})
        item = first
        while item is not None:
            for choice in renderer.step(*item):
                yield event({**envelope, "choices": [choice], **usage_field})
            item = await anext(events, None)
        if include_usage:
            yield event({**envelope, "choices": [], "usage": renderer.usage()})
    except BackendError as e:
        yield event(from_backend(e).body())
    except Exception:
        log.exception("stream %s failed", envelope.get("id"))
        yield event(APIError("internal error while streaming", status=500, type="server_error").body())
    finally:
        await events.aclose()
        note_usage(renderer.usage())
    yield DONE
