"""Validation of a /v1/chat/completions body into the family's ChatRequest plus generation settings."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import invalid
from gateway.types import ChatRequest
from gateway.validation.fields import MAX_TOP_LOGPROBS, Fields, GenerationSettings, parse_model, parse_settings
from gateway.validation.schema_bounds import check_bounded, check_schema

MAX_MESSAGES = 10_000
MAX_TOOLS = 128
MAX_TOOL_CALLS = 128
MAX_CONTENT_PARTS = 1_000
TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""OpenAI's a-z, A-Z, 0-9, _ and - (at most 64), plus . and : which namespaced tools use."""
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
_ROLES = ("system", "developer", "user", "assistant", "tool")
_UNSUPPORTED_PARTS = {"image_url": "image", "input_audio": "audio", "file": "file", "video_url": "video"}
EMPTY_PARAMETERS = {"type": "object", "properties": {}}


@dataclass
class ChatCompletionRequest:
    model: str
    chat: ChatRequest
    settings: GenerationSettings


def parse_chat_completion(body: Any) -> ChatCompletionRequest:
    """Validate a chat completions body; raises APIError (400) naming the bad param."""
    fields = Fields(body)
    model = parse_model(fields)
    for key in ("functions", "function_call"):
        fields.refuse(key, None, "use 'tools' and 'tool_choice'")
    fields.refuse("audio", None, "audio output is not available")
    fields.refuse("web_search_options", None, "web search is not available")
    settings = parse_settings(fields, max_tokens_keys=("max_completion_tokens", "max_tokens"))
    settings.logprobs = fields.boolean("logprobs", False)
    settings.top_logprobs = fields.integer("top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
    if settings.top_logprobs and not settings.logprobs:
        raise invalid("'top_logprobs' requires 'logprobs' to be true", "top_logprobs")
    tools = parse_tools(fields)
    tool_choice, tools = parse_tool_choice(fields, tools)
    chat = ChatRequest(
        messages=parse_messages(fields),
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=fields.boolean("parallel_tool_calls", True),
        response_format=parse_response_format(fields),
        template_kwargs=_template_kwargs(fields),
        reasoning_effort=fields.string("reasoning_effort", choices=REASONING_EFFORTS),
        add_generation_prompt=fields.boolean("add_generation_prompt", True),
        continue_final_message=fields.boolean("continue_final_message", False),
    )
    _check_continuation(chat)
    return ChatCompletionRequest(model=model, chat=chat, settings=settings)


def parse_messages(fields: Fields) -> list[dict[str, Any]]:
    raw = fields.array("messages", max_len=MAX_MESSAGES, required=True)
    if not raw:
        raise invalid("'messages' must hold at least one message", "messages")
    return [_message(Fields(m, f"messages[{i}]")) for i, m in enumerate(raw)]


def _message(m: Fields) -> dict[str, Any]:
    role = m.string("role", required=True, choices=_ROLES)
    out: dict[str, Any] = {"role": "system" if role == "developer" else role}
    if role == "assistant":
        out["content"] = _content(m, required=False)
        reasoning = m.string("reasoning_content")
        if reasoning is not None:
            out["reasoning_content"] = reasoning
        calls = _tool_calls(m)
        if calls:
            out["tool_calls"] = calls
    else:
        out["content"] = _content(m, required=True)
    if role == "tool":
        out["tool_call_id"] = m.string("tool_call_id", required=True)
    name = m.string("name")
    if name is not None:
        out["name"] = name
    return out


def _content(m: Fields, *, required: bool) -> str | None:
    """A message's text: a string, or its text parts joined with nothing between them."""
    v = m.get("content")
    param = m.param("content")
    if v is None:
        if required:
            raise invalid(f"'{param}' is required", param, "missing_required_parameter")
        return None
    if isinstance(v, str):
        return v
    parts = m.array("content", max_len=MAX_CONTENT_PARTS)
    texts = []
    for j, part in enumerate(parts):
        p = Fields(part, f"{param}[{j}]")
        kind = p.string("type", required=True)
        if kind in _UNSUPPORTED_PARTS:
            raise invalid(
                f"{_UNSUPPORTED_PARTS[kind]} inputs are not supported by this model", p.path, "unsupported_content"
            )
        if kind != "text":
            raise invalid(f"unknown content part type {kind!r}; expected 'text'", p.param("type"))
        texts.append(p.string("text", required=True))
    return "".join(texts)


def _tool_calls(m: Fields) -> list[dict[str, Any]]:
    raw = m.array("tool_calls", max_len=MAX_TOOL_CALLS) or []
    calls = []
    for j, item in enumerate(raw):
        call = Fields(item, m.param("tool_calls") + f"[{j}]")
        call.string("type", "function", choices=("function",))
        fn = call.obj("function")
        if fn is None:
            raise invalid(
                f"'{call.param('function')}' is required", call.param("function"), "missing_required_parameter"
            )
        calls.append(
            {
                "id": call.string("id", required=True),
                "type": "function",
                "function": {"name": fn.string("name", required=True), "arguments": parse_arguments(fn)},
            }
        )
    return calls


def parse_arguments(fn: Fields) -> dict[str, Any]:
    """Tool call arguments: a JSON string holding an object (an object itself is accepted too)."""
    param = fn.param("arguments")
    raw = fn.get("arguments")
    if isinstance(raw, dict):
        value = raw
    elif isinstance(raw, str):
        try:
            value = orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError as e:
            raise invalid(f"'{param}' is not valid JSON: {e}", param) from None
    else:
        raise invalid(f"'{param}' must be a JSON string", param)
    if not isinstance(value, dict):
        raise invalid(f"'{param}' must encode a JSON object", param)
    check_bounded(value, param)
    return value


def parse_tools(fields: Fields, *, flat: bool = False) -> list[dict[str, Any]]:
    """Function tools; `flat`: the Responses shape, name and parameters on the tool itself."""
    raw = fields.array("tools", max_len=MAX_TOOLS) or []
    tools: list[dict[str, Any]] = []
    for i, item in enumerate(raw):
        tool = Fields(item, f"tools[{i}]")
        kind = tool.string("type", required=True)
        if kind != "function":
            raise invalid(f"tool type {kind!r} is not supported; only 'function' tools are", tool.param("type"))
        fn = tool if flat else tool.obj("function")
        if fn is None:
            raise invalid(
                f"'{tool.param('function')}' is required", tool.param("function"), "missing_required_parameter"
            )
        tools.append({"type": "function", "function": function_spec(fn, tools)})
    return tools


def function_spec(fn: Fields, declared: list[dict[str, Any]], parameters_key: str = "parameters") -> dict[str, Any]:
    """One function's name, description, parameters schema and strict flag; its name new among `declared`."""
    name = fn.string("name", required=True)
    if not TOOL_NAME.fullmatch(name):
        raise invalid(f"'{fn.param('name')}' must be 1-64 letters, digits, '_', '-', '.' or ':'", fn.param("name"))
    if any(t["function"]["name"] == name for t in declared):
        raise invalid(f"tool name {name!r} is declared twice", fn.param("name"))
    parameters = fn.get(parameters_key)
    if parameters is None:
        parameters = dict(EMPTY_PARAMETERS)
    check_schema(parameters, fn.param(parameters_key), object_root=True)
    spec: dict[str, Any] = {"name": name, "parameters": parameters}
    description = fn.string("description")
    if description is not None:
        spec["description"] = description
    if fn.has("strict"):
        spec["strict"] = fn.boolean("strict", False)
    return spec


def parse_tool_choice(
    fields: Fields, tools: list[dict[str, Any]], *, flat: bool = False
) -> tuple[str | dict[str, Any], list[dict[str, Any]]]:
    """The tool choice and the tools the prompt declares; allowed_tools narrows the declared tools.
    `flat`: the Responses shape ({"type": "function", "name"}, allowed_tools' mode and tools on the choice)."""
    v = fields.get("tool_choice")
    names = [t["function"]["name"] for t in tools]
    if v is None:
        return "auto", tools
    if isinstance(v, str):
        choice = fields.string("tool_choice", choices=("none", "auto", "required"))
        if choice == "required" and not tools:
            raise invalid("tool_choice 'required' needs at least one tool in 'tools'", "tool_choice")
        return choice, tools
    tc = Fields(v, "tool_choice")
    kind = tc.string("type", required=True, choices=("function", "allowed_tools"))
    if kind == "function":
        fn = tc if flat else tc.obj("function")
        return {"type": "function", "function": {"name": _named(fn, "tool_choice.function", names)}}, tools
    allowed = tc if flat else tc.obj("allowed_tools")
    if allowed is None:
        raise invalid(
            "'tool_choice.allowed_tools' is required", "tool_choice.allowed_tools", "missing_required_parameter"
        )
    mode = allowed.string("mode", "auto", choices=("auto", "required"))
    listed = allowed.array("tools", max_len=MAX_TOOLS, required=True)
    keep = set()
    for i, t in enumerate(listed):
        item = Fields(t, f"{allowed.param('tools')}[{i}]")
        keep.add(_named(item if flat else item.obj("function"), item.param("function"), names))
    if not keep:
        raise invalid(f"'{allowed.param('tools')}' must name at least one tool", allowed.param("tools"))
    return mode, [t for t in tools if t["function"]["name"] in keep]


def _named(fn: Fields | None, param: str, names: list[str]) -> str:
    if fn is None:
        raise invalid(f"'{param}' is required", param, "missing_required_parameter")
    name = fn.string("name", required=True)
    if name not in names:
        raise invalid(f"tool {name!r} is not declared in 'tools'", fn.param("name"))
    return name


def parse_response_format(fields: Fields) -> dict[str, Any] | None:
    rf = fields.obj("response_format")
    if rf is None:
        return None
    kind = rf.string("type", required=True, choices=("text", "json_object", "json_schema"))
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    js = rf.obj("json_schema")
    if js is None:
        raise invalid(
            "'response_format.json_schema' is required", "response_format.json_schema", "missing_required_parameter"
        )
    return {"type": "json_schema", "json_schema": json_schema_format(js)}


def json_schema_format(js: Fields) -> dict[str, Any]:
    """A json_schema format's name, schema, strict flag and description."""
    name = js.string("name", required=True)
    if not TOOL_NAME.fullmatch(name):
        raise invalid(f"'{js.param('name')}' must be 1-64 letters, digits, '_', '-', '.' or ':'", js.param("name"))
    schema = js.get("schema")
    if schema is None:
        schema = {}
    check_schema(schema, js.param("schema"), object_root=False)
    out: dict[str, Any] = {"name": name, "schema": schema, "strict": js.boolean("strict", False)}
    description = js.string("description")
    if description is not None:
        out["description"] = description
    return out


def _template_kwargs(fields: Fields) -> dict[str, Any]:
    kwargs = fields.obj("chat_template_kwargs")
    if kwargs is None:
        return {}
    check_bounded(kwargs.value, "chat_template_kwargs")
    return dict(kwargs.value)


def _check_continuation(chat: ChatRequest) -> None:
    if not chat.continue_final_message:
        return
    if chat.add_generation_prompt:
        raise invalid("'continue_final_message' needs 'add_generation_prompt' set to false", "continue_final_message")
    if chat.messages[-1]["role"] != "assistant":
        raise invalid(
            "'continue_final_message' needs the last message to be from the assistant", "continue_final_message"
        )
