"""GET /v1/models and /v1/models/{id}: the served models as OpenAI model cards that Anthropic's clients read too
(its ModelInfo's type, display_name and created_at; its page's has_more, first_id and last_id)."""

from __future__ import annotations

from datetime import UTC, datetime
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
        "type": "model",
        "display_name": model.id,
        "created_at": datetime.fromtimestamp(model.created, UTC).isoformat().replace("+00:00", "Z"),
    }


async def list_models(registry: ModelRegistry) -> Response:
    cards = [model_card(m) for m in registry]
    first, last = (cards[0]["id"], cards[-1]["id"]) if cards else (None, None)
    return json_response({"object": "list", "data": cards, "has_more": False, "first_id": first, "last_id": last})


async def get_model(registry: ModelRegistry, model_id: str) -> Response:
    return json_response(model_card(served_model(registry, model_id)))
