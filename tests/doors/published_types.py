"""Checks of bodies and events against the published Responses types: the `openai` client's and OpenResponses'."""

from __future__ import annotations

import inspect
from typing import Any

import openresponses_types.types as open_responses
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

_OPENAI_EVENT = TypeAdapter(ResponseStreamEvent)
_OPEN_EVENTS = {
    member.value: cls
    for cls in vars(open_responses).values()
    if inspect.isclass(cls) and cls.__name__.endswith("StreamingEvent") and "type" in getattr(cls, "model_fields", {})
    for member in cls.model_fields["type"].annotation
}


def check_response(body: dict[str, Any]) -> Response:
    """A Response body as both specifications type it; the openai model is returned."""
    open_responses.ResponseResource.model_validate(body)
    return Response.model_validate(body)


_OPEN_NAMES = {
    "response.reasoning_text.delta": "response.reasoning.delta",
    "response.reasoning_text.done": "response.reasoning.done",
}
"""OpenAI's reasoning text events under OpenResponses' names (the same fields)."""


def check_event(event: dict[str, Any]) -> None:
    """One stream event as both specifications type it (each must know its type, OpenResponses by its own name)."""
    _OPENAI_EVENT.validate_python(event)
    kind = _OPEN_NAMES.get(event["type"], event["type"])
    _OPEN_EVENTS[kind].model_validate({**event, "type": kind})
