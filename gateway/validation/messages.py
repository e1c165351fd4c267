"""Validation of an Anthropic Messages body into the same chat request and settings as /v1/chat/completions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import invalid
from gateway.types import ChatRequest
from gateway.validation.chat import MAX_CONTENT_PARTS, MAX_MESSAGES, MAX_TOOLS, function_spec
from gateway.validation.fields import (
    MAX_NEW_TOKENS,
    Fields,
    GenerationSettings,
    parse_model,
    parse_stop,
    parse_top_p_top_k,
)
from gateway.validation.schema_bounds import check_bounded, check_schema

_UNSUPPORTED_BLOCKS = {"image": "image", "document": "document", "search_result": "search result"}
THINKING_EFFORT = ((4096, "low"), (16384, "medium"))
"""budget_tokens below each bound → that reasoning effort; above the last, "high"."""


@dataclass
class MessagesRequest:
    model: str
    chat: ChatRequest
    settings: GenerationSettings


def parse_messages_request(body: Any, *, count_only: bool = False) -> MessagesRequest:
    """Validate a Messages body (`count_only`: a count_tokens body, no max_tokens); raises APIError (400)."""
    fields = Fields(body)
    model = parse_model(fields)
    for key in ("mcp_servers", "container"):
        fields.refuse(key, None, "not available on this gateway")
    max_tokens = fields.integer("max_tokens", None, 1, MAX_NEW_TOKENS)
    if max_tokens is None and not count_only:
        raise invalid("'max_tokens' is required", "max_tokens", "missing_required_parameter")
    top_p, top_k = parse_top_p_top_k(fields, top_k_min=0)
    settings = GenerationSettings(
        max_tokens=max_tokens,
        stop=parse_stop(fields, "stop_sequences"),
        temperature=fields.number("temperature", 1.0, 0.0, 1.0),
        top_p=top_p,
        top_k=top_k,
        stream=fields.boolean("stream", False),
    )
    fields.obj("metadata")  # user_id only labels the request
    tools = _tools(fields)
    tool_choice, parallel = _tool_choice(fields, tools)
    template_kwargs, effort = _thinking(fields)
    output = fields.obj("output_config")
    response_format, output_effort = _output_config(output) if output else (None, None)
    messages = _system(fields) + _messages(fields)
    chat = ChatRequest(
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        response_format=response_format,
        template_kwargs=template_kwargs,
        reasoning_effort=output_effort or effort,
    )
    return MessagesRequest(model=model, chat=chat, settings=settings)


def _system(fields: Fields) -> list[dict[str, Any]]:
    v = fields.get("system")
    if v is None:
        return []
    text = v if isinstance(v, str) else "".join(_texts(fields, "system"))
    return [{"role": "system", "content": text}]


def _texts(f: Fields, key: str) -> list[str]:
    """The text of `key`: a string, or text blocks."""
    v = f.get(key)
    if isinstance(v, str):
        return [v]
    out = []
    for j, block in enumerate(f.array(key, max_len=MAX_CONTENT_PARTS) or []):
        b = Fields(block, f"{f.param(key)}[{j}]")
        kind = b.string("type", required=True)
        _refuse_media(b, kind)
        if kind != "text":
            raise invalid(f"block type {kind!r} is not allowed here; expected 'text'", b.param("type"))
        out.append(b.string("text", required=True))
    return out


def _refuse_media(b: Fields, kind: str) -> None:
    if kind in _UNSUPPORTED_BLOCKS:
        raise invalid(
            f"{_UNSUPPORTED_BLOCKS[kind]} inputs are not supported by this model", b.path, "unsupported_content"
        )


def _messages(fields: Fields) -> list[dict[str, Any]]:
    raw = fields.array("messages", max_len=MAX_MESSAGES, required=True)
    if not raw:
        raise invalid("'messages' must hold at least one message", "messages")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(raw):
        m = Fields(item, f"messages[{i}]")
        role = m.string("role", required=True, choices=("user", "assistant"))
        if isinstance(m.get("content"), str):
            out.append({"role": role, "content": m.get("content")})
            continue
        blocks = m.array("content", max_len=MAX_CONTENT_PARTS, required=True)
        parts = [Fields(b, f"{m.param('content')}[{j}]") for j, b in enumerate(blocks)]
        out += _assistant(parts) if role == "assistant" else _user(parts)
    return out


def _user(blocks: list[Fields]) -> list[dict[str, Any]]:
    """A user turn: its text as one user message, each tool_result as a tool message, in their order."""
    out: list[dict[str, Any]] = []
    for b in blocks:
        kind = b.string("type", required=True)
        _refuse_media(b, kind)
        if kind == "text":
            if out and out[-1]["role"] == "user":
                out[-1]["content"] += b.string("text", required=True)
            else:
                out.append({"role": "user", "content": b.string("text", required=True)})
        elif kind == "tool_result":
            text = "".join(_texts(b, "content")) if b.has("content") else ""
            if b.boolean("is_error", False):
                text = f"Error: {text}"
            out.append({"role": "tool", "tool_call_id": b.string("tool_use_id", required=True), "content": text})
        else:
            raise invalid(f"block type {kind!r} is not allowed in a user turn", b.param("type"))
    return out


def _assistant(blocks: list[Fields]) -> list[dict[str, Any]]:
    """An assistant turn: text, thinking and tool_use blocks as one message."""
    texts, thinking, calls = [], [], []
    for b in blocks:
        kind = b.string("type", required=True)
        if kind == "text":
            texts.append(b.string("text", required=True))
        elif kind == "thinking":
            thinking.append(b.string("thinking", required=True))
        elif kind == "redacted_thinking":
            continue  # encrypted by another provider: nothing this model can read
        elif kind == "tool_use":
            arguments = b.obj("input")
            if arguments is None:
                raise invalid(f"'{b.param('input')}' is required", b.param("input"), "missing_required_parameter")
            check_bounded(arguments.value, b.param("input"))
            name = b.string("name", required=True)
            call = {"name": name, "arguments": dict(arguments.value)}
            calls.append({"id": b.string("id", required=True), "type": "function", "function": call})
        else:
            raise invalid(f"block type {kind!r} is not allowed in an assistant turn", b.param("type"))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if thinking:
        message["reasoning_content"] = "".join(thinking)
    if calls:
        message["tool_calls"] = calls
    return [message]


def _tools(fields: Fields) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for i, item in enumerate(fields.array("tools", max_len=MAX_TOOLS) or []):
        tool = Fields(item, f"tools[{i}]")
        kind = tool.string("type", "custom")
        if kind != "custom":
            raise invalid(
                f"tool type {kind!r} is not supported; only client tools with an input_schema are", tool.param("type")
            )
        if not tool.has("input_schema"):
            raise invalid(
                f"'{tool.param('input_schema')}' is required", tool.param("input_schema"), "missing_required_parameter"
            )
        tools.append({"type": "function", "function": function_spec(tool, tools, parameters_key="input_schema")})
    return tools


def _tool_choice(fields: Fields, tools: list[dict[str, Any]]) -> tuple[str | dict[str, Any], bool]:
    """Anthropic's auto / any / tool / none as chat's tool choice, and whether calls may be parallel."""
    tc = fields.obj("tool_choice")
    if tc is None:
        return "auto", True
    kind = tc.string("type", required=True, choices=("auto", "any", "tool", "none"))
    parallel = not tc.boolean("disable_parallel_tool_use", False)
    if kind in ("any", "tool") and not tools:
        raise invalid(f"tool_choice {kind!r} needs at least one tool in 'tools'", "tool_choice")
    if kind == "tool":
        name = tc.string("name", required=True)
        if name not in [t["function"]["name"] for t in tools]:
            raise invalid(f"tool {name!r} is not declared in 'tools'", tc.param("name"))
        return {"type": "function", "function": {"name": name}}, parallel
    return {"any": "required"}.get(kind, kind), parallel


def _thinking(fields: Fields) -> tuple[dict[str, Any], str | None]:
    """`thinking` as the template switches families read, and a reasoning effort from its budget."""
    t = fields.obj("thinking")
    if t is None:
        return {}, None
    kind = t.string("type", required=True, choices=("enabled", "disabled", "adaptive"))
    if kind == "disabled":
        return {"enable_thinking": False, "thinking": False}, None
    effort = "medium"
    if kind == "enabled":
        budget = t.integer("budget_tokens", None, 1024, MAX_NEW_TOKENS)
        if budget is None:
            raise invalid(
                "'thinking.budget_tokens' is required", "thinking.budget_tokens", "missing_required_parameter"
            )
        effort = next((e for bound, e in THINKING_EFFORT if budget < bound), "high")
    return {"enable_thinking": True, "thinking": True}, effort


def _output_config(output: Fields) -> tuple[dict[str, Any] | None, str | None]:
    """`output_config`: a JSON schema the answer must follow (through chat's json_schema grammar) and an effort."""
    effort = output.string("effort", choices=("low", "medium", "high", "xhigh", "max"))
    effort = "xhigh" if effort == "max" else effort
    fmt = output.obj("format")
    if fmt is None:
        return None, effort
    fmt.string("type", required=True, choices=("json_schema",))
    schema = fmt.get("schema")
    if schema is None:
        raise invalid(f"'{fmt.param('schema')}' is required", fmt.param("schema"), "missing_required_parameter")
    check_schema(schema, fmt.param("schema"), object_root=False)
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": True}}, effort
