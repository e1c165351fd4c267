"""GET /v1/models and /v1/models/{id}: the served models as OpenAI model cards."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from backends.asgi import json_response
from gateway.models.registry import ModelRegistry, ServedModel, served_model


def model_card(model: ServedModel) -> dict[str, Any]:
    return {
        "id": model.id,
        "object": "model",
        "created": model.created,
        "owned_by": "gateway",
        "max_model_len": model.context_length,
    }


async def list_models(registry: ModelRegistry) -> Response:
    return json_response({"object": "list", "data": [model_card(m) for m in registry]})


async def get_model(registry: ModelRegistry, model_id: str) -> Response:
    return json_response(model_card(served_model(registry, model_id)))
