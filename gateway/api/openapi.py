"""GET /openapi.json: the gateway's OpenAPI 3.1 document, request schemas generated from the validation declarations.

Request bodies come from `gateway/validation/` (the same `Obj` declarations the validators read); answers, SSE
streams and errors are described here. The document is built once per process and served as stored bytes.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.validation.chat import CHAT
from gateway.validation.completions import COMPLETION
from gateway.validation.declare import Obj, Refs, Schema
from gateway.validation.messages import COUNT_TOKENS, MESSAGES
from gateway.validation.responses import INPUT_ITEMS_QUERY, RESPONSES, RETRIEVE_QUERY
from gateway.validation.tokenize import DETOKENIZE, TOKENIZE_CHAT, TOKENIZE_PROMPT

REQUEST_BODIES: dict[str, Obj | tuple[Obj, ...]] = {
    "/v1/chat/completions": CHAT,
    "/v1/completions": COMPLETION,
    "/v1/responses": RESPONSES,
    "/v1/responses/input_tokens": RESPONSES,
    "/v1/messages": MESSAGES,
    "/v1/messages/count_tokens": COUNT_TOKENS,
    "/tokenize": (TOKENIZE_CHAT, TOKENIZE_PROMPT),
    "/detokenize": DETOKENIZE,
}
"""Each POST route's body declaration (a tuple: any one of them)."""

_STRING = {"type": "string"}
_INT = {"type": "integer"}
_NULLABLE_STRING = {"type": ["string", "null"]}


def _obj(required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    """An object with these properties (the `required` ones always present); further keys allowed."""
    return {"type": "object", "properties": {**required, **(optional or {})}, "required": list(required)}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


_USAGE = _obj(
    {"prompt_tokens": _INT, "completion_tokens": _INT, "total_tokens": _INT},
    {
        "prompt_tokens_details": _obj({"cached_tokens": _INT}),
        "completion_tokens_details": _obj({}, {"reasoning_tokens": _INT}),
    },
)
_FINISH = {"type": ["string", "null"], "enum": ["stop", "length", "tool_calls", "content_filter", "abort", None]}
_LOGPROBS = {"type": ["object", "null"]}
_STOP_REASON = {
    "description": "vLLM's: the stop string or stop token id that ended the choice; null for EOS and length",
    "type": ["string", "integer", "null"],
}
_TOOL_CALL_OUT = _obj(
    {"id": _STRING, "type": {"const": "function"}, "function": _obj({"name": _STRING, "arguments": _STRING})}
)
ANSWERS: dict[str, Schema] = {
    "Error": _obj(
        {"error": _obj({"message": _STRING, "type": _STRING, "param": _NULLABLE_STRING, "code": _NULLABLE_STRING})}
    ),
    "AnthropicError": _obj({"type": {"const": "error"}, "error": _obj({"type": _STRING, "message": _STRING})}),
    "Usage": _USAGE,
    "ServerSentEvent": {
        "description": "One event of the stream (stream true): data is a JSON chunk, or [DONE] at the end.",
        "type": "object",
        "properties": {"event": _STRING, "data": _STRING, "id": _STRING},
        "required": ["data"],
    },
    "ChatCompletion": _obj(
        {
            "id": _STRING,
            "object": {"const": "chat.completion"},
            "created": _INT,
            "model": _STRING,
            "choices": {
                "type": "array",
                "items": _obj(
                    {
                        "index": _INT,
                        "message": _obj(
                            {"role": {"const": "assistant"}, "content": _NULLABLE_STRING},
                            {
                                "reasoning": _NULLABLE_STRING,
                                "reasoning_content": _NULLABLE_STRING,
                                "tool_calls": {"type": "array", "items": _TOOL_CALL_OUT},
                            },
                        ),
                        "logprobs": _LOGPROBS,
                        "finish_reason": _FINISH,
                        "stop_reason": _STOP_REASON,
                    }
                ),
            },
            "usage": _ref("Usage"),
        }
    ),
    "Completion": _obj(
        {
            "id": _STRING,
            "object": {"const": "text_completion"},
            "created": _INT,
            "model": _STRING,
            "choices": {
                "type": "array",
                "items": _obj(
                    {
                        "index": _INT,
                        "text": _STRING,
                        "logprobs": _LOGPROBS,
                        "finish_reason": _FINISH,
                        "stop_reason": _STOP_REASON,
                    }
                ),
            },
            "usage": _ref("Usage"),
        }
    ),
    "Response": _obj(
        {
            "id": _STRING,
            "object": {"const": "response"},
            "created_at": _INT,
            "status": {"enum": ["in_progress", "completed", "incomplete", "failed"]},
            "model": _STRING,
            "output": {"type": "array", "items": _obj({"type": _STRING})},
            "store": {"type": "boolean"},
            "metadata": {"type": "object", "additionalProperties": _STRING},
        },
        {"usage": {"type": ["object", "null"]}, "previous_response_id": _NULLABLE_STRING},
    ),
    "ResponseDeleted": _obj({"id": _STRING, "object": {"const": "response.deleted"}, "deleted": {"const": True}}),
    "InputItemList": _obj(
        {
            "object": {"const": "list"},
            "data": {"type": "array", "items": _obj({"type": _STRING, "id": _STRING})},
            "first_id": _NULLABLE_STRING,
            "last_id": _NULLABLE_STRING,
            "has_more": {"type": "boolean"},
        }
    ),
    "AnthropicMessage": _obj(
        {
            "id": _STRING,
            "type": {"const": "message"},
            "role": {"const": "assistant"},
            "content": {"type": "array", "items": _obj({"type": _STRING})},
            "model": _STRING,
            "stop_reason": _NULLABLE_STRING,
            "usage": _obj({"input_tokens": _INT, "output_tokens": _INT}),
        }
    ),
    "InputTokens": _obj({"input_tokens": _INT}),
    "ResponseInputTokens": _obj({"object": {"const": "response.input_tokens"}, "input_tokens": _INT}),
    "Model": _obj(
        {"id": _STRING, "object": {"const": "model"}, "created": _INT, "owned_by": _STRING},
        # Anthropic's ModelInfo fields, for its clients
        {"max_model_len": _INT, "type": {"const": "model"}, "display_name": _STRING, "created_at": _STRING},
    ),
    "ModelList": _obj(
        {"object": {"const": "list"}, "data": {"type": "array", "items": _ref("Model")}},
        {"has_more": {"type": "boolean"}, "first_id": _NULLABLE_STRING, "last_id": _NULLABLE_STRING},
    ),
    "Tokens": _obj(
        {"tokens": {"type": "array", "items": _INT}, "count": _INT, "max_model_len": _INT, "prompt": _STRING},
        {"token_strs": {"type": "array", "items": _STRING}},
    ),
    "Detokenized": _obj({"prompt": _STRING}),
    "Health": _obj({"status": {"const": "ok"}}),
    "Ready": _obj(
        {"ready": {"type": "boolean"}, "draining": {"type": "boolean"}, "models": {"type": "object"}},
        {"policies": {"type": "object"}},
    ),
}
"""Answer schemas by component name."""

_STATUS_TEXT = {
    400: "Invalid request: the error names the param at fault",
    401: "No or unknown API key (with --policies)",
    403: "A tool the tenant may not use",
    404: "Unknown model, stored response or path",
    405: "Method not allowed",
    413: "Body over the body limit",
    415: "A compressed body (content-encoding other than identity)",
    429: "Over the tenant's limits; retry-after says when to try again",
    502: "The backend broke its stream",
    503: "Past --max-concurrency, or no backend can take the request (retry-after)",
    504: "The backend did not answer in time",
}
_GENERATION_ERRORS = (400, 401, 403, 404, 413, 415, 429, 502, 503, 504)
_BODY_ERRORS = (400, 401, 404, 413, 415, 503)


def _json(schema: Schema, stream: bool = False) -> dict[str, Any]:
    content: dict[str, Any] = {"application/json": {"schema": schema}}
    if stream:
        content["text/event-stream"] = {"schema": _ref("ServerSentEvent")}
    return content


def _errors(statuses: tuple[int, ...], error: str = "Error") -> dict[str, Any]:
    return {str(s): {"description": _STATUS_TEXT[s], "content": _json(_ref(error))} for s in statuses}


def _answers(ok: str, errors: tuple[int, ...], *, stream: bool = False, error: str = "Error") -> dict[str, Any]:
    return {"200": {"description": "OK", "content": _json(_ref(ok), stream)}, **_errors(errors, error)}


def _post(path: str, summary: str, ok: str, errors: tuple[int, ...], refs: Refs, **kw: Any) -> dict[str, Any]:
    decl = REQUEST_BODIES[path]
    shapes = decl if isinstance(decl, tuple) else (decl,)
    refs_of = [shape.ref(refs) for shape in shapes]
    schema = refs_of[0] if len(refs_of) == 1 else {"anyOf": refs_of}
    return {
        "post": {
            "summary": summary,
            "operationId": path.strip("/").replace("/", "_"),
            "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
            "responses": _answers(ok, errors, **kw),
        }
    }


def _get(summary: str, ok: Schema | str, errors: tuple[int, ...] = (401, 503)) -> dict[str, Any]:
    content = _json(_ref(ok)) if isinstance(ok, str) else ok
    return {"summary": summary, "responses": {"200": {"description": "OK", "content": content}, **_errors(errors)}}


def _with_links(path: dict[str, Any], links: dict[str, str]) -> dict[str, Any]:
    """The POST's 200 links to the operations that take its `id` as `response_id`."""
    path["post"]["responses"]["200"]["links"] = {
        name: {"operationId": op, "parameters": {"response_id": "$response.body#/id"}} for name, op in links.items()
    }
    return path


def _response_id() -> dict[str, Any]:
    return {"name": "response_id", "in": "path", "required": True, "schema": _STRING}


def _query(decl: Obj, refs: Refs) -> list[dict[str, Any]]:
    """A declaration's fields as optional query parameters."""
    return [{"name": key, "in": "query", "required": False, "schema": f.schema(refs)} for key, f in decl.fields.items()]


def build_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of every route the gateway serves."""
    refs: Refs = {}
    stored = {
        "get": {
            **_get("A stored response", "Response", (400, 401, 404, 503)),
            "operationId": "get_response",
            "parameters": _query(RETRIEVE_QUERY, refs),
        },
        "delete": {
            **_get("Delete a stored response", "ResponseDeleted", (401, 404, 503)),
            "operationId": "delete_response",
        },
        "parameters": [_response_id()],
    }
    paths = {
        "/v1/chat/completions": _post(
            "/v1/chat/completions", "Chat completion", "ChatCompletion", _GENERATION_ERRORS, refs, stream=True
        ),
        "/v1/completions": _post(
            "/v1/completions", "Text completion", "Completion", _GENERATION_ERRORS, refs, stream=True
        ),
        "/v1/responses": _with_links(
            _post("/v1/responses", "Create a response", "Response", _GENERATION_ERRORS, refs, stream=True),
            {"GetResponse": "get_response", "DeleteResponse": "delete_response", "ListInputItems": "list_input_items"},
        ),
        "/v1/responses/input_tokens": _post(
            "/v1/responses/input_tokens", "Count a Responses prompt", "ResponseInputTokens", _BODY_ERRORS, refs
        ),
        "/v1/responses/{response_id}": stored,
        "/v1/responses/{response_id}/input_items": {
            "get": {
                **_get("A stored response's input items", "InputItemList", (400, 401, 404, 503)),
                "operationId": "list_input_items",
                "parameters": [_response_id(), *_query(INPUT_ITEMS_QUERY, refs)],
            }
        },
        "/v1/responses/{response_id}/cancel": {
            "post": {
                "summary": "Cancel a background response (none runs here: a stored response is a 400)",
                "operationId": "cancel_response",
                "parameters": [_response_id()],
                "responses": _errors((400, 401, 404, 503)),
            }
        },
        "/v1/messages": _post(
            "/v1/messages",
            "Anthropic Messages",
            "AnthropicMessage",
            _GENERATION_ERRORS,
            refs,
            stream=True,
            error="AnthropicError",
        ),
        "/v1/messages/count_tokens": _post(
            "/v1/messages/count_tokens",
            "Count a Messages prompt",
            "InputTokens",
            _BODY_ERRORS,
            refs,
            error="AnthropicError",
        ),
        "/v1/models": {"get": {**_get("Served models", "ModelList"), "operationId": "list_models"}},
        "/v1/models/{model_id}": {
            "get": {
                **_get("One served model", "Model", (401, 404, 503)),
                "operationId": "get_model",
                "parameters": [{"name": "model_id", "in": "path", "required": True, "schema": _STRING}],
            }
        },
        "/tokenize": _post("/tokenize", "The prompt ids a backend would receive", "Tokens", _BODY_ERRORS, refs),
        "/detokenize": _post("/detokenize", "Ids back to text", "Detokenized", _BODY_ERRORS, refs),
        "/health": {"get": {**_get("Liveness", "Health", ()), "operationId": "health"}},
        "/ready": {
            "get": {
                "summary": "Readiness: every backend ready and not draining",
                "operationId": "ready",
                "responses": {
                    "200": {"description": "Ready", "content": _json(_ref("Ready"))},
                    "503": {"description": "Not ready, or draining", "content": _json(_ref("Ready"))},
                },
            }
        },
        "/metrics": {
            "get": {
                **_get("Prometheus metrics", {"text/plain": {"schema": _STRING}}),
                "operationId": "metrics",
            }
        },
        "/openapi.json": {
            "get": {
                **_get("This document", {"application/json": {"schema": {"type": "object"}}}),
                "operationId": "openapi",
            }
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "LLM gateway", "version": _version()},
        "paths": paths,
        "components": {"schemas": {**ANSWERS, **dict(sorted(refs.items()))}},
    }


def _version() -> str:
    try:
        return version("llm-gateway")
    except PackageNotFoundError:
        return "0"


@cache
def document_bytes() -> bytes:
    """The document, serialized once per process."""
    return orjson.dumps(build_document())


async def openapi(request: Request) -> Response:
    return Response(document_bytes(), media_type="application/json")
