"""Validation of a /v1/chat/completions body into the family's ChatRequest plus generation settings."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from backends.exact_json import WideInteger, loads
from gateway.errors import APIError, invalid, wide_integer
from gateway.types import ChatRequest, UndeclaredParameters
from gateway.validation.declare import (
    Field,
    Obj,
    Variants,
    array,
    boolean,
    either,
    free_object,
    obj,
    refused,
    string,
)
from gateway.validation.fields import (
    METADATA,
    SETTINGS,
    TOP_LOGPROBS,
    Fields,
    GenerationSettings,
    Reader,
    Reads,
    parse_metadata,
    parse_model,
    parse_settings,
    settings_reads,
)
from gateway.validation.schema_bounds import check_bounded, check_schema

MAX_MESSAGES = 10_000
MAX_TOOLS = 128
MAX_TOOL_CALLS = 128
MAX_CONTENT_PARTS = 1_000
TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""OpenAI's a-z, A-Z, 0-9, _ and - (at most 64), plus . and : which namespaced tools use."""
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
MODALITIES = ("text", "audio")
_ROLES = ("system", "developer", "user", "assistant", "tool")
_UNSUPPORTED_PARTS = {"image_url": "image", "input_audio": "audio", "file": "file", "video_url": "video"}
EMPTY_PARAMETERS = {"type": "object", "properties": {}}
TEXT: dict = {"type": "string"}
OBJECT: dict = {"type": "object"}
TOOL_NAME_FIELD = string("1-64 letters, digits, '_', '-', '.' or ':'", required=True, pattern=f"^{TOOL_NAME.pattern}$")

TEXT_PART = Obj("TextPart", {"type": string(required=True, choices=("text",)), "text": string(required=True)})
FUNCTION_CALL = Obj(
    "FunctionCall",
    {
        "name": string(required=True),
        "arguments": either(string("A JSON object, encoded.", required=True), OBJECT),
    },
)
TOOL_CALL = Obj(
    "ToolCall",
    {
        "id": string(required=True),
        "type": string(default="function", choices=("function",)),
        "function": obj(FUNCTION_CALL, required=True),
    },
)
CONTENT = either(array(TEXT_PART, MAX_CONTENT_PARTS, required=True, min_items=1), TEXT)
"""A system, developer, user or tool message's content: a string, or at least one text part (OpenAI's minItems)."""
REFUSAL_PART = Obj(
    "RefusalPart", {"type": string(required=True, choices=("refusal",)), "refusal": string(required=True)}
)
ASSISTANT_CONTENT = either(
    array(Variants("type", {"text": TEXT_PART, "refusal": REFUSAL_PART}), MAX_CONTENT_PARTS), TEXT
)
"""An assistant's content may hold refusal parts too (OpenAI's); their text joins the content, as in Responses."""
ASSISTANT_SAYS = [
    {"required": [key], "properties": {key: value}}
    for key, value in (
        ("content", {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1}]}),
        ("refusal", {"type": "string"}),
        ("tool_calls", {"type": "array", "minItems": 1}),
        ("function_call", {"not": {"type": "null"}}),
    )
]
"""OpenAI's rule: an assistant message has content (a string or at least one part), a refusal, tool calls or a
legacy function_call (which is taken, not read)."""
NAME = string("The author's name.")
TEXT_MESSAGE = Obj(
    "ChatTextMessage",
    {"role": string(required=True, choices=("system", "developer", "user")), "content": CONTENT, "name": NAME},
)
MESSAGE = Variants(
    "role",
    {
        "system": TEXT_MESSAGE,
        "developer": TEXT_MESSAGE,
        "user": TEXT_MESSAGE,
        "assistant": Obj(
            "ChatAssistantMessage",
            {
                "role": string(required=True, choices=("assistant",)),
                "content": ASSISTANT_CONTENT,
                "refusal": string("The model's refusal: the content when 'content' is absent."),
                "reasoning_content": string("The reasoning before the answer."),
                "reasoning": string("The same, under vLLM's name for it (both given: equal)."),
                "tool_calls": array(TOOL_CALL, MAX_TOOL_CALLS),
                "name": NAME,
            },
            extra={"anyOf": ASSISTANT_SAYS},
        ),
        "tool": Obj(
            "ChatToolMessage",
            {
                "role": string(required=True, choices=("tool",)),
                "content": CONTENT,
                "tool_call_id": string(required=True),
                "name": NAME,
            },
        ),
    },
)
FUNCTION_FIELDS: dict[str, Field] = {
    "name": TOOL_NAME_FIELD,
    "description": string(),
    "parameters": free_object("A JSON schema whose root is an object; default: no parameters."),
    "strict": boolean(),
}
FUNCTION = Obj("FunctionDefinition", FUNCTION_FIELDS)
TOOL = Obj("Tool", {"type": string(required=True, choices=("function",)), "function": obj(FUNCTION, required=True)})
NAMED = Obj("NamedFunction", {"name": string(required=True)})
ALLOWED_TOOL = Obj("AllowedTool", {"type": string(choices=("function",)), "function": obj(NAMED, required=True)})
ALLOWED_TOOLS = Obj(
    "AllowedTools",
    {
        "mode": string(default="auto", choices=("auto", "required")),
        "tools": array(ALLOWED_TOOL, MAX_TOOLS, required=True, min_items=1),
    },
)
TOOL_CHOICE = Variants(
    "type",
    {
        "function": Obj(
            "ToolChoiceFunction",
            {"type": string(required=True, choices=("function",)), "function": obj(NAMED, required=True)},
        ),
        "allowed_tools": Obj(
            "ToolChoiceAllowedTools",
            {
                "type": string(required=True, choices=("allowed_tools",)),
                "allowed_tools": obj(ALLOWED_TOOLS, required=True),
            },
        ),
    },
)
TOOL_CHOICE_MODES = ("none", "auto", "required")
JSON_SCHEMA_FIELDS: dict[str, Field] = {
    "name": TOOL_NAME_FIELD,
    "schema": free_object("A JSON schema; default: any JSON value."),
    "strict": boolean(False),
    "description": string(),
}
JSON_SCHEMA = Obj("JSONSchemaFormat", JSON_SCHEMA_FIELDS)


def format_variants(prefix: str, json_schema: dict[str, Field]) -> Variants:
    """A response format by type: text, json_object, or json_schema with these fields."""
    return Variants(
        "type",
        {
            kind: Obj(f"{prefix}{name}", {"type": string(required=True, choices=(kind,)), **fields})
            for kind, name, fields in (
                ("text", "Text", {}),
                ("json_object", "JSONObject", {}),
                ("json_schema", "JSONSchema", json_schema),
            )
        },
    )


RESPONSE_FORMAT = format_variants("ResponseFormat", {"json_schema": obj(JSON_SCHEMA, required=True)})
CHAT_FIELDS: dict[str, Field] = {
    **SETTINGS,
    "messages": array(MESSAGE, MAX_MESSAGES, required=True, min_items=1),
    "functions": refused("use 'tools' and 'tool_choice'"),
    "function_call": refused("use 'tools' and 'tool_choice'"),
    "audio": refused("audio output is not available"),
    "web_search_options": refused("web search is not available"),
    "chat_template": refused("a request's own chat template is not run; the model's is (vLLM's default too)"),
    "modalities": array(
        {"type": "string", "enum": list(MODALITIES)}, len(MODALITIES), "Only 'text': no audio is produced here."
    ),
    "metadata": METADATA,
    "store": boolean(False, "Not used: chat completions are not stored here."),
    "safety_identifier": string("An end user's stable id; not used here."),
    "prompt_cache_key": string("Not used: prompts are cached by their prefix."),
    "service_tier": string("Not used: one tier.", choices=("auto", "default", "flex", "scale", "priority")),
    "verbosity": string("Not used.", choices=("low", "medium", "high")),
    "max_completion_tokens": SETTINGS["max_tokens"],
    "logprobs": boolean(False),
    "top_logprobs": TOP_LOGPROBS,
    "tools": array(TOOL, MAX_TOOLS),
    "tool_choice": either(obj(TOOL_CHOICE), {"type": "string", "enum": list(TOOL_CHOICE_MODES)}),
    "parallel_tool_calls": boolean(True),
    "response_format": obj(RESPONSE_FORMAT),
    "chat_template_kwargs": free_object(
        "Extra variables for the chat template; an add_generation_prompt or continue_final_message in it replaces the "
        "request's own (as vLLM's do)."
    ),
    "reasoning_effort": string(choices=REASONING_EFFORTS),
    "add_generation_prompt": boolean(True),
    "continue_final_message": boolean(False, "Needs add_generation_prompt false and a last assistant message."),
    "add_special_tokens": boolean(
        False,
        "The tokenizer's special tokens (e.g. BOS) around the rendered prompt, on top of those the template writes "
        "(vLLM's: a second BOS where the template writes one).",
    ),
}
CHAT = Obj("ChatCompletionRequest", CHAT_FIELDS)


@dataclass
class ChatCompletionRequest:
    model: str
    chat: ChatRequest
    settings: GenerationSettings


def parse_chat_completion(body: Any) -> ChatCompletionRequest:
    """Validate a chat completions body; raises APIError (400) naming the bad param."""
    fields = Fields(body, CHAT)
    model = parse_model(fields)
    settings = parse_settings(fields, _SETTINGS_READS)  # with the labels before and logprobs after
    if settings.top_logprobs and not settings.logprobs:
        raise invalid("'top_logprobs' requires 'logprobs' to be true", "top_logprobs")
    tool_choice, tools = _tools(fields)
    template_kwargs, ((add_generation_prompt, generation_param), (continue_final, continue_param)) = _rendering(fields)
    messages = parse_messages(fields)
    tail = fields.read(_TAIL_READS)
    chat = ChatRequest(  # positional, in the dataclass's field order: keywords cost ~4.5 K instructions more
        messages,
        tools,
        tool_choice,
        tail["parallel_tool_calls"],
        tail["response_format"],
        template_kwargs,
        tail["reasoning_effort"],
        add_generation_prompt,
        continue_final,  # continue_final_message
        tail["add_special_tokens"],
    )
    _check_continuation(chat, generation_param, continue_param)
    return ChatCompletionRequest(model, chat, settings)


_TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls")


def _tools(fields: Fields) -> tuple[str | dict[str, Any], list[dict[str, Any]]]:
    """The tool choice and the tools the prompt declares."""
    if not fields.given(_TOOL_FIELDS):  # (most bodies: their defaults)
        return "auto", []
    tools = parse_tools(fields)
    _check_tools_given(fields, tools)
    return parse_tool_choice(fields, tools)


_RENDER_FIELDS = ("chat_template_kwargs", "add_generation_prompt", "continue_final_message")


def _rendering(fields: Fields) -> tuple[dict[str, Any], list[tuple[bool, str]]]:
    """The chat template's extra variables and the render switches (`_render_flags`)."""
    if not fields.given(_RENDER_FIELDS):  # (most bodies: their defaults)
        return {}, _DEFAULT_RENDER_FLAGS
    template_kwargs = _template_kwargs(fields)
    return template_kwargs, _render_flags(fields, template_kwargs)


def _check_tools_given(fields: Fields, tools: list[dict[str, Any]]) -> None:
    """OpenAI's rule: `tool_choice` and `parallel_tool_calls` only with `tools`. A tool_choice of 'none' without
    tools stays allowed, as vLLM allows it on purpose (clients such as Semantic Kernel always send it)."""
    if tools:
        return
    if fields.get("tool_choice") not in (None, "none"):
        raise _needs_tools("tool_choice")
    if fields.has("parallel_tool_calls"):
        raise _needs_tools("parallel_tool_calls")


def _needs_tools(key: str) -> APIError:
    return invalid(f"Invalid value for '{key}': '{key}' is only allowed when 'tools' are specified.", key)


def _check_modalities(fields: Fields, key: str) -> None:
    """`modalities`: the output's kinds, of which this gateway produces text only."""
    for i, kind in enumerate(fields.array(key) or ()):
        if kind not in MODALITIES:
            raise invalid(f"'modalities[{i}]' must be one of 'text', 'audio', got {kind!r}", f"modalities[{i}]")
        if kind == "audio":
            raise invalid("audio output is not available: 'modalities' may name 'text' only", "modalities")


def parse_messages(fields: Fields) -> list[dict[str, Any]]:
    raw = fields.array("messages") or []
    if all(type(m) is dict for m in raw):  # (else `items` names the first that is no object, before any is read)
        messages = list(map(_plain_message, raw))
        if None not in messages:  # (most chats: plain turns only, which hold no tool turn to check)
            return messages
        messages = [m or _message(fields.item("messages", i)) for i, m in enumerate(messages)]
    else:
        messages = [_message(m) for m in fields.items("messages")]
    check_tool_turns(messages, "messages")
    return messages


_PLAIN_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
"""The roles of plain messages, as `_message` writes them."""


def _plain_message(m: dict[str, Any]) -> dict[str, Any] | None:
    """A message of a role above holding a string content and nothing else (most turns of a chat), as `_message`
    reads it, without its field-by-field reads; None for any other message."""
    if len(m) != 2:
        return None
    role, content = m.get("role"), m.get("content")
    if type(role) is not str or type(content) is not str:
        return None
    role = _PLAIN_ROLES.get(role)
    return None if role is None else {"role": role, "content": content}


def check_tool_turns(messages: list[dict[str, Any]], param: str) -> None:
    """OpenAI's rule: tool messages answer the assistant message with 'tool_calls' right before them, each call once,
    and every call of that message is answered before the conversation moves on (a last assistant turn may leave its
    calls open)."""
    calls: dict[str, int | None] = {}
    """The last assistant turn's call ids → the message that answered it, if one did; empty when the messages before
    are not its tool turn."""
    called_at = 0
    for i, m in enumerate(messages):
        if m["role"] == "tool":
            call_id = m["tool_call_id"]
            if not calls:
                raise invalid(
                    "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'",
                    f"{param}[{i}].role",
                )
            if call_id not in calls:
                raise invalid(
                    f"'tool_call_id' of '{call_id}' not found in 'tool_calls' of previous message",
                    f"{param}[{i}].tool_call_id",
                )
            if calls[call_id] is not None:  # OpenAI's words (a second answer would reach the model as another result)
                raise invalid(
                    f"Invalid parameter: Duplicate value for 'tool_call_id' of '{call_id}' in "
                    f"{param}[{calls[call_id]}] and {param}[{i}].",
                    f"{param}[{i}].tool_call_id",
                )
            calls[call_id] = i
            continue
        if calls:
            _check_answered(calls, called_at, param)
        tool_calls = m.get("tool_calls")
        calls = dict.fromkeys(c["id"] for c in tool_calls) if tool_calls else {}
        called_at = i
    if calls and any(answered is not None for answered in calls.values()):
        _check_answered(calls, called_at, param)


def _check_answered(calls: dict[str, int | None], at: int, param: str) -> None:
    missing = [call_id for call_id, answered in calls.items() if answered is None]
    if missing:
        raise invalid(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(missing)}",
            f"{param}[{at}].tool_calls",
        )


def _reasoning(m: Fields) -> str | None:
    """An assistant's reasoning: `reasoning_content`, or `reasoning` (vLLM renamed the field; clients written for it
    send that), the same text when both are given."""
    given, renamed = m.string("reasoning_content"), m.string("reasoning")
    if given is not None and renamed is not None and given != renamed:
        raise invalid(
            "'reasoning' and 'reasoning_content' name the same field: give one, or the same text", m.param("reasoning")
        )
    return renamed if given is None else given


def _message(m: Fields) -> dict[str, Any]:
    m = m.variant()
    role = m.string("role")
    out: dict[str, Any] = {"role": "system" if role == "developer" else role}
    out["content"] = _content(m)
    if role == "assistant":
        reasoning = _reasoning(m)
        if reasoning is not None:
            out["reasoning_content"] = reasoning
        calls = _tool_calls(m)
        if calls:
            out["tool_calls"] = calls
        _assistant_content(m, out)
    if role == "tool":
        out["tool_call_id"] = m.string("tool_call_id")
    name = m.string("name")
    if name is not None:
        out["name"] = name
    return out


def _assistant_content(m: Fields, message: dict[str, Any]) -> None:
    """The refusal as the content when there is none; OpenAI's rule that the content is required unless the message
    has tool_calls (or a legacy function_call, taken as before), an empty list of parts being no content."""
    refusal = m.string("refusal")
    said = m.get("content") not in (None, [])
    if not said and refusal is not None:
        message["content"] = refusal
        said = True
    if not (said or "tool_calls" in message or m.value.get("function_call") is not None):
        raise invalid(
            "Invalid value for 'content': an assistant message needs 'content' (a string or at least one part), "
            "'refusal' or 'tool_calls'",
            m.param("content"),
        )


def _content(m: Fields) -> str | None:
    """A message's text: a string, or its text parts joined with nothing between them."""
    v = m.get("content")
    if v is None or isinstance(v, str):
        return v
    texts = []
    for p in m.items("content"):
        kind = p.get("type")
        if isinstance(kind, str) and kind in _UNSUPPORTED_PARTS:
            raise invalid(
                f"{_UNSUPPORTED_PARTS[kind]} inputs are not supported by this model", p.path, "unsupported_content"
            )
        if isinstance(p.decl, Variants):  # an assistant's part: text or refusal
            p = p.variant()
        p.string("type")
        texts.append(p.string("refusal" if kind == "refusal" else "text"))
    return "".join(texts)


def _tool_calls(m: Fields) -> list[dict[str, Any]]:
    calls = []
    for call in m.items("tool_calls"):
        call.string("type")
        fn = call.obj("function")
        calls.append(
            {
                "id": call.string("id"),
                "type": "function",
                "function": {"name": fn.string("name"), "arguments": parse_arguments(fn)},
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
            value = loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError as e:
            raise invalid(f"'{param}' is not valid JSON: {e}", param) from None
        except WideInteger as e:
            raise wide_integer(param, f"'{e.place or 'the value'}' in '{param}'") from None
    else:
        raise invalid(f"'{param}' must be a JSON string", param)
    if not isinstance(value, dict):
        raise invalid(f"'{param}' must encode a JSON object", param)
    check_bounded(value, param)
    return value


def parse_tools(fields: Fields, *, flat: bool = False) -> list[dict[str, Any]]:
    """Function tools; `flat`: the Responses shape, name and parameters on the tool itself."""
    tools: list[dict[str, Any]] = []
    for tool in fields.items("tools"):
        tool.string("type")
        fn = tool if flat else tool.obj("function")
        tools.append({"type": "function", "function": function_spec(fn, tools)})
    return tools


def function_spec(fn: Fields, declared: list[dict[str, Any]], parameters_key: str = "parameters") -> dict[str, Any]:
    """One function's name, description, parameters schema and strict flag; its name new among `declared`."""
    name = fn.string("name")
    if any(t["function"]["name"] == name for t in declared):
        raise invalid(f"tool name {name!r} is declared twice", fn.param("name"))
    parameters = fn.get(parameters_key)
    if parameters is None:
        parameters = UndeclaredParameters(EMPTY_PARAMETERS)
    check_schema(parameters, fn.param(parameters_key), object_root=True)
    spec: dict[str, Any] = {"name": name, "parameters": parameters}
    description = fn.string("description")
    if description is not None:
        spec["description"] = description
    if fn.has("strict"):
        spec["strict"] = fn.boolean("strict")
    return spec


def parse_tool_choice(
    fields: Fields, tools: list[dict[str, Any]], *, flat: bool = False
) -> tuple[str | dict[str, Any], list[dict[str, Any]]]:
    """The tool choice and the tools the prompt declares; allowed_tools narrows the declared tools.
    `flat`: the Responses shape ({"type": "function", "name"}, allowed_tools' mode and tools on the choice)."""
    v = fields.get("tool_choice")
    if v is None:
        return "auto", tools
    names = [t["function"]["name"] for t in tools]
    if isinstance(v, str):
        if v not in TOOL_CHOICE_MODES:
            raise invalid(
                f"'tool_choice' must be one of {', '.join(map(repr, TOOL_CHOICE_MODES))}, got {v!r}", "tool_choice"
            )
        if v == "required" and not tools:
            raise invalid("tool_choice 'required' needs at least one tool in 'tools'", "tool_choice")
        return v, tools
    tc = fields.obj("tool_choice").variant()
    kind = tc.string("type")
    if kind == "function":
        return {"type": "function", "function": {"name": _named(tc, names, flat)}}, tools
    allowed = tc if flat else tc.obj("allowed_tools")
    mode = allowed.string("mode")
    keep = {_named(item, names, flat) for item in allowed.items("tools")}
    return mode, [t for t in tools if t["function"]["name"] in keep]


def _named(item: Fields, names: list[str], flat: bool) -> str:
    """The name of a declared tool that `item` names (in its function, unless `flat`)."""
    item.string("type")
    fn = item if flat else item.obj("function")
    name = fn.string("name")
    if name not in names:
        raise invalid(f"tool {name!r} is not declared in 'tools'", fn.param("name"))
    return name


def parse_response_format(fields: Fields, key: str = "response_format") -> dict[str, Any] | None:
    given = fields.get(key)
    kind = given.get("type") if type(given) is dict else None
    if kind == "json_object":  # (the two formats of nothing but their type, valid as they are)
        return {"type": "json_object"}
    if kind == "text":
        return None
    rf = fields.obj(key)
    if rf is None:
        return None
    rf = rf.variant()
    kind = rf.string("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    js = rf.obj("json_schema")
    return {"type": "json_schema", "json_schema": json_schema_format(js)}


def json_schema_format(js: Fields) -> dict[str, Any]:
    """A json_schema format's name, schema, strict flag and description."""
    name = js.string("name", required=True)
    schema = js.get("schema")
    if schema is None:
        schema = {}
    check_schema(schema, js.param("schema"), object_root=False)
    out: dict[str, Any] = {"name": name, "schema": schema, "strict": js.boolean("strict")}
    description = js.string("description")
    if description is not None:
        out["description"] = description
    return out


_NOT_TEMPLATE_KWARGS = ("chat_template", "tokenize")
"""Arguments of `apply_chat_template` that vLLM refuses in `chat_template_kwargs` (the template is resolved by then;
a request's rendering is text): a 400 here too, not a template silently kept."""


def _template_kwargs(fields: Fields) -> dict[str, Any]:
    kwargs = fields.mapping("chat_template_kwargs")
    if kwargs is None:
        return {}
    for key in _NOT_TEMPLATE_KWARGS:
        if key in kwargs:
            param = f"chat_template_kwargs.{key}"
            raise invalid(
                f"'{param}' is not supported: {key} is the server's to choose", param, "unsupported_parameter"
            )
    check_bounded(kwargs, "chat_template_kwargs")
    return dict(kwargs)


_RENDER_FLAGS = ("add_generation_prompt", "continue_final_message")
"""The request's render switches that `chat_template_kwargs` may also set: vLLM merges the kwargs over the request's
fields and hands both to transformers' `apply_chat_template` as its arguments, so the kwargs' win."""
_DEFAULT_RENDER_FLAGS = [(CHAT.optional_defaults[key], key) for key in _RENDER_FLAGS]
"""`_render_flags` of a body that gives no render field (read it, never change it)."""


def _render_flags(fields: Fields, template_kwargs: dict[str, Any]) -> list[tuple[bool, str]]:
    """Each render switch's value and the param that set it, in `_RENDER_FLAGS`' order: `chat_template_kwargs`'
    (taken out of the template's variables, as transformers takes its arguments out) where it has one, else the
    request's field. Both fields set true is a 400 whatever the kwargs say (vLLM's request check reads the fields
    alone)."""
    generation, continuation = _RENDER_FLAGS
    if fields.value.get(generation) is True and fields.value.get(continuation) is True:
        raise invalid(f"'{continuation}' and '{generation}' cannot both be true", continuation)
    if not template_kwargs:  # (most requests)
        return [(fields.boolean(generation), generation), (fields.boolean(continuation), continuation)]
    flags = []
    for key in _RENDER_FLAGS:
        if key in template_kwargs:
            param = f"chat_template_kwargs.{key}"
            value = template_kwargs.pop(key)
            if not isinstance(value, bool):
                raise invalid(f"'{param}' must be a boolean", param)
            flags.append((value, param))
        else:
            flags.append((fields.boolean(key), key))
    return flags


def _check_continuation(chat: ChatRequest, generation_param: str, continue_param: str) -> None:
    if not chat.continue_final_message:
        return
    if chat.add_generation_prompt:
        param = generation_param if generation_param != "add_generation_prompt" else continue_param
        raise invalid(f"'{continue_param}' needs '{generation_param}' set to false", param)
    if chat.messages[-1]["role"] != "assistant":
        raise invalid(f"'{continue_param}' needs the last message to be from the assistant", continue_param)


_LABELS: dict[str, Reader] = {
    **dict.fromkeys(("functions", "function_call", "audio", "web_search_options", "chat_template"), Fields.refuse),
    "modalities": _check_modalities,
    "metadata": parse_metadata,  # labels only
    "store": Fields.boolean,  # OpenAI's fields that change nothing here, typed as OpenAI types them
    **dict.fromkeys(("safety_identifier", "prompt_cache_key", "service_tier", "verbosity"), Fields.string),
}
"""A chat body's fields checked before its settings, their values unused."""
_SETTINGS_READS = settings_reads(
    CHAT,
    _LABELS,
    ("max_completion_tokens", "max_tokens"),
    {"logprobs": Fields.boolean, "top_logprobs": Fields.integer},
)
_TAIL_READS = Reads(
    CHAT,
    {
        "parallel_tool_calls": Fields.boolean,
        "response_format": parse_response_format,
        "reasoning_effort": Fields.string,
        "add_special_tokens": Fields.boolean,
    },
)
"""A chat body's fields read after its messages."""
