"""POST /tokenize and /detokenize: the exact prompt ids the backend would receive, and ids back to text."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from backends.asgi import json_response
from backends.json_types import as_integer
from gateway.api.admission import request_policy
from gateway.api.bodies import read_json
from gateway.errors import invalid
from gateway.models.planning import encode_chat_off_loop, encode_texts_off_loop
from gateway.models.registry import ModelRegistry, ServedModel, served_model
from gateway.validation.chat import parse_chat_completion
from gateway.validation.fields import Fields, note_ignored
from gateway.validation.tokenize import DETOKENIZE, TOKENIZE_CHAT, TOKENIZE_PROMPT


async def tokenize(request: Request, registry: ModelRegistry, max_body: int) -> Response:
    """`{"model"?, "messages" (+ chat fields) | "prompt" (+ "add_special_tokens"), "return_token_strs"?}` → `{"tokens",
    "count", "max_model_len", "prompt", "token_strs"?}`."""
    body = await read_json(request, max_body)
    if isinstance(body, dict) and body.get("messages") is not None:
        if body.get("prompt") is not None:  # which of the two to encode would be a guess
            raise invalid("give either 'prompt' or 'messages', not both", "prompt")
        fields = Fields(body, TOKENIZE_CHAT)
        note_ignored(body, TOKENIZE_CHAT)
        model = requested_model(registry, fields)
        parsed = parse_chat_completion(body if body.get("model") is not None else {**body, "model": model.id})
        chat = request_policy(request).check_tools(parsed.chat, body.get("tools") or ())  # as the chat door renders
        text, ids = await encode_chat_off_loop(model, chat, past_context_ok=True)
    else:
        fields = Fields(body, TOKENIZE_PROMPT)
        note_ignored(body, TOKENIZE_PROMPT)
        model = requested_model(registry, fields)
        text = fields.string("prompt")
        # counted whole past the context, as vLLM's: a long one encoded off the event loop
        (ids,) = await encode_texts_off_loop(model, [text], fields.boolean("add_special_tokens"))
    answer = {"tokens": ids, "count": len(ids), "max_model_len": model.context_length, "prompt": text}
    if fields.boolean("return_token_strs"):
        answer["token_strs"] = [model.tokenizer.id_to_token(i) for i in ids]
    return json_response(answer)


async def detokenize(request: Request, registry: ModelRegistry, max_body: int) -> Response:
    """`{"model"?, "tokens": [ids]}` → `{"prompt": text}` with added tokens spelled out."""
    body = await read_json(request, max_body)
    fields = Fields(body, DETOKENIZE)
    note_ignored(body, DETOKENIZE)
    model = requested_model(registry, fields)
    vocab = model.tokenizer.get_vocab_size(with_added_tokens=True)
    ids = [as_integer(t) for t in fields.array("tokens")]  # an integral float is an id, as the schema says
    for i, t in enumerate(ids):
        if t is None or not 0 <= t < vocab:
            raise invalid(f"'tokens[{i}]' must be a token id from 0 to {vocab - 1}", f"tokens[{i}]")
    return json_response({"prompt": model.decode(ids)})


def requested_model(registry: ModelRegistry, fields: Fields) -> ServedModel:
    """The model `model` names; when the body names none, the one model served (to this caller), as vLLM's /tokenize
    and /detokenize serve their model then; with several, which to use would be a guess: a 400 naming `model`."""
    model_id = fields.string("model")
    if model_id is not None:
        return served_model(registry, model_id)
    served = [m.id for m in registry]
    if len(served) != 1:
        raise invalid(
            f"'model' is required: {len(served)} models are served (GET /v1/models lists them)",
            "model",
            "missing_required_parameter",
        )
    return served_model(registry, served[0])
