"""Validation of a /v1/responses body: input items in one canonical form, tools, formats and settings.

The canonical items are what the store keeps and `input_items` lists; `items_to_messages` turns them
(and a previous response's items) into the chat messages every family renders.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.errors import invalid
from gateway.validation.chat import (
    MAX_CONTENT_PARTS,
    MAX_MESSAGES,
    REASONING_EFFORTS,
    json_schema_format,
    parse_arguments,
    parse_tool_choice,
    parse_tools,
)
from gateway.validation.fields import (
    MAX_NEW_TOKENS,
    MAX_TOP_LOGPROBS,
    Fields,
    GenerationSettings,
    parse_model,
    parse_top_p_top_k,
)

MAX_METADATA = 16
MAX_INCLUDE = 16
INCLUDABLE = ("message.output_text.logprobs", "reasoning.encrypted_content")
"""`include` values that apply here (reasoning items always carry their text; nothing is encrypted)."""
_ROLES = ("user", "system", "developer", "assistant")
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal", "summary_text": "text"}
_UNSUPPORTED_PARTS = {"input_image": "image", "input_file": "file", "input_audio": "audio"}


@dataclass
class ResponsesRequest:
    model: str
    items: list[dict[str, Any]]
    """The input as canonical items, each with an id."""
    instructions: str | None
    tools: list[dict[str, Any]]
    tool_choice: str | dict[str, Any]
    parallel_tool_calls: bool
    response_format: dict[str, Any] | None
    reasoning_effort: str | None
    settings: GenerationSettings
    store: bool
    previous_response_id: str | None
    metadata: dict[str, str]
    include: list[str]
    echo: dict[str, Any] = field(default_factory=dict)
    """Request fields a Response repeats, in the Responses shape (tools, tool_choice, text, reasoning, ...)."""


def item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def parse_responses_request(body: Any) -> ResponsesRequest:
    """Validate a Responses create body; raises APIError (400) naming the bad param."""
    fields = Fields(body)
    model = parse_model(fields)
    fields.refuse("background", False, "background responses are not available")
    fields.refuse("conversation", None, "use 'previous_response_id' to continue a conversation")
    fields.refuse("prompt", None, "stored prompt templates are not available")
    truncation = fields.string("truncation", "disabled", choices=("disabled", "auto"))
    if truncation == "auto":
        raise invalid("'truncation' 'auto' is not supported: the input is never truncated", "truncation")
    include = _include(fields)
    tools = parse_tools(fields, flat=True)
    tool_choice, active = parse_tool_choice(fields, tools, flat=True)
    text = fields.obj("text")
    response_format, text_echo = _text_format(text)
    reasoning = fields.obj("reasoning")
    effort = reasoning.string("effort", choices=REASONING_EFFORTS) if reasoning else None
    summary = reasoning.string("summary", choices=("auto", "concise", "detailed")) if reasoning else None
    top_p, top_k = parse_top_p_top_k(fields)
    settings = GenerationSettings(
        max_tokens=fields.integer("max_output_tokens", None, 1, MAX_NEW_TOKENS),
        temperature=fields.number("temperature", 1.0, 0.0, 2.0),
        top_p=top_p,
        top_k=top_k,
        frequency_penalty=fields.number("frequency_penalty", 0.0, -2.0, 2.0),
        presence_penalty=fields.number("presence_penalty", 0.0, -2.0, 2.0),
        logprobs="message.output_text.logprobs" in include,
        top_logprobs=fields.integer("top_logprobs", 0, 0, MAX_TOP_LOGPROBS),
        stream=fields.boolean("stream", False),
    )
    parallel = fields.boolean("parallel_tool_calls", True)
    request = ResponsesRequest(
        model=model,
        items=parse_input(fields),
        instructions=fields.string("instructions"),
        tools=active,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        response_format=response_format,
        reasoning_effort=effort,
        settings=settings,
        store=fields.boolean("store", True),
        previous_response_id=fields.string("previous_response_id"),
        metadata=_metadata(fields),
        include=include,
    )
    request.echo = {
        "tools": [_tool_echo(t) for t in tools],
        "tool_choice": fields.get("tool_choice") or "auto",
        "text": text_echo,
        "reasoning": {"effort": effort, "summary": summary},
        "truncation": truncation,
        "temperature": settings.temperature,
        "top_p": fields.number("top_p", 1.0, 0.0, 1.0),
        "top_logprobs": settings.top_logprobs,
        "max_output_tokens": settings.max_tokens,
        "frequency_penalty": settings.frequency_penalty,
        "presence_penalty": settings.presence_penalty,
    }
    return request


def parse_input(fields: Fields) -> list[dict[str, Any]]:
    """`input`: a string (one user message) or an array of items, each made canonical."""
    v = fields.get("input")
    if v is None:
        raise invalid("'input' is required", "input", "missing_required_parameter")
    if isinstance(v, str):
        return [_message_item("user", [{"type": "input_text", "text": v}])]
    raw = fields.array("input", max_len=MAX_MESSAGES)
    return [_item(Fields(item, f"input[{i}]")) for i, item in enumerate(raw)]


def _item(f: Fields) -> dict[str, Any]:
    kind = f.string("type", "message")
    if kind == "message":
        role = f.string("role", required=True, choices=_ROLES)
        return _message_item(role, _parts(f, "content", "output_text" if role == "assistant" else "input_text"))
    if kind == "function_call":
        name = f.string("name", required=True)
        arguments = parse_arguments(f)
        raw = f.get("arguments")
        return {
            "type": "function_call",
            "id": f.string("id") or item_id("fc"),
            "call_id": f.string("call_id", required=True),
            "name": name,
            "arguments": raw if isinstance(raw, str) else orjson.dumps(arguments).decode(),
            "status": "completed",
        }
    if kind == "function_call_output":
        output = f.get("output")
        text = output if isinstance(output, str) else "".join(p["text"] for p in _parts(f, "output", "input_text"))
        return {
            "type": "function_call_output",
            "id": f.string("id") or item_id("fco"),
            "call_id": f.string("call_id", required=True),
            "output": text,
            "status": "completed",
        }
    if kind == "reasoning":
        out: dict[str, Any] = {
            "type": "reasoning",
            "id": f.string("id") or item_id("rs"),
            "summary": _reasoning_parts(f, "summary", "summary_text"),
        }
        if f.has("content"):
            out["content"] = _reasoning_parts(f, "content", "reasoning_text")
        return out
    raise invalid(
        f"input item type {kind!r} is not supported; use 'message', 'function_call', 'function_call_output' "
        "or 'reasoning'",
        f.param("type"),
    )


def _message_item(role: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "id": item_id("msg"), "role": role, "content": content, "status": "completed"}


def _parts(f: Fields, key: str, text_type: str) -> list[dict[str, Any]]:
    """A message's content (a string or text parts) as parts of `text_type`."""
    v = f.get(key)
    if v is None:
        raise invalid(f"'{f.param(key)}' is required", f.param(key), "missing_required_parameter")
    texts = (
        [v]
        if isinstance(v, str)
        else [
            _part_text(Fields(p, f"{f.param(key)}[{j}]")) for j, p in enumerate(f.array(key, max_len=MAX_CONTENT_PARTS))
        ]
    )
    if text_type == "output_text":
        return [{"type": "output_text", "text": t, "annotations": []} for t in texts]
    return [{"type": text_type, "text": t} for t in texts]


def _part_text(p: Fields) -> str:
    kind = p.string("type", required=True)
    if kind in _UNSUPPORTED_PARTS:
        raise invalid(
            f"{_UNSUPPORTED_PARTS[kind]} inputs are not supported by this model", p.path, "unsupported_content"
        )
    if kind not in _TEXT_PARTS:
        raise invalid(f"unknown content part type {kind!r}; expected 'input_text' or 'output_text'", p.param("type"))
    return p.string(_TEXT_PARTS[kind], required=True)


def _reasoning_parts(f: Fields, key: str, part_type: str) -> list[dict[str, Any]]:
    raw = f.array(key, max_len=MAX_CONTENT_PARTS, required=key == "summary")
    return [
        {"type": part_type, "text": Fields(p, f"{f.param(key)}[{j}]").string("text", required=True)}
        for j, p in enumerate(raw or [])
    ]


def items_to_messages(items: list[dict[str, Any]], instructions: str | None) -> list[dict[str, Any]]:
    """Canonical items → chat messages: calls join the assistant turn before them, reasoning the turn after it."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    reasoning: list[str] = []
    for item in items:
        kind = item["type"]
        if kind == "reasoning":
            reasoning += [p["text"] for p in item.get("content") or item["summary"]]
            continue
        if kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
            continue
        if kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": "".join(p["text"] for p in item["content"])})
        else:  # function_call
            if not messages or messages[-1]["role"] != "assistant":
                messages.append({"role": "assistant", "content": None})
            call = {"name": item["name"], "arguments": orjson.loads(item["arguments"] or "{}")}
            messages[-1].setdefault("tool_calls", []).append(
                {"id": item["call_id"], "type": "function", "function": call}
            )
        if reasoning and messages[-1]["role"] == "assistant":
            messages[-1]["reasoning_content"] = "\n".join(reasoning)
            reasoning = []
    return messages


def _text_format(text: Fields | None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """`text.format` as chat's response_format, and the `text` a Response repeats."""
    fmt = text.obj("format") if text else None
    if fmt is None:
        return None, {"format": {"type": "text"}}
    kind = fmt.string("type", required=True, choices=("text", "json_object", "json_schema"))
    if kind == "text":
        return None, {"format": {"type": "text"}}
    if kind == "json_object":
        return {"type": "json_object"}, {"format": {"type": "json_object"}}
    spec = json_schema_format(fmt)
    return {"type": "json_schema", "json_schema": spec}, {"format": {"type": "json_schema", **spec}}


def _tool_echo(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool["function"]
    return {
        "type": "function",
        "name": fn["name"],
        "description": fn.get("description"),
        "parameters": fn["parameters"],
        "strict": fn.get("strict", False),
    }


def _include(fields: Fields) -> list[str]:
    raw = fields.array("include", max_len=MAX_INCLUDE) or []
    for i, value in enumerate(raw):
        if value not in INCLUDABLE:
            raise invalid(
                f"'include[{i}]' {value!r} does not apply here; allowed: {', '.join(map(repr, INCLUDABLE))}",
                f"include[{i}]",
            )
    return list(raw)


def _metadata(fields: Fields) -> dict[str, str]:
    meta = fields.obj("metadata")
    if meta is None:
        return {}
    if len(meta.value) > MAX_METADATA:
        raise invalid(f"'metadata' has more than {MAX_METADATA} keys", "metadata")
    for key, value in meta.value.items():
        if len(key) > 64 or not isinstance(value, str) or len(value) > 512:
            raise invalid("'metadata' keys are at most 64 characters and values strings of at most 512", "metadata")
    return dict(meta.value)
