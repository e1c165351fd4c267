"""Validation of an Anthropic Messages body into the same chat request and settings as /v1/chat/completions."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from gateway.errors import invalid
from gateway.types import ChatRequest
from gateway.validation.chat import (
    FUNCTION_FIELDS,
    MAX_CONTENT_PARTS,
    MAX_MESSAGES,
    MAX_TOOLS,
    TEXT,
    function_spec,
)
from gateway.validation.declare import (
    Field,
    Obj,
    Variants,
    array,
    boolean,
    either,
    free_object,
    integer,
    number,
    obj,
    refused,
    string,
)
from gateway.validation.fields import (
    MAX_NEW_TOKENS,
    MAX_TOKENS,
    MODEL,
    STOP_STRING,
    STREAM,
    TOP_P,
    Fields,
    GenerationSettings,
    Reads,
    backend_top_p_top_k,
    parse_model,
    parse_stop,
)
from gateway.validation.schema_bounds import check_bounded, check_schema

_UNSUPPORTED_BLOCKS = {"image": "image", "document": "document", "search_result": "search result"}
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")
"""Anthropic's tool names: no '.' or ':' (which chat and Responses take), up to 128 characters."""
MAX_STOP_SEQUENCES = 64
"""Anthropic documents no limit on stop_sequences (OpenAI's 4 is not theirs); this bound keeps the per-token stop
matching small (~30 µs a piece at 64 strings of 256 characters, against ~0.5 ms at 1,024)."""
NOT_WHITESPACE = "text content blocks must contain non-whitespace text"
THINKING_EFFORT = ((4096, "low"), (16384, "medium"))
"""budget_tokens below each bound → that reasoning effort; above the last, "high"."""

TEXT_BLOCK = Obj(
    "AnthropicTextBlock", {"type": string(required=True, choices=("text",)), "text": string(required=True)}
)
TEXTS = either(array(TEXT_BLOCK, MAX_CONTENT_PARTS), TEXT)
BLOCK = Variants(
    "type",
    {
        "text": TEXT_BLOCK,
        "tool_result": Obj(
            "AnthropicToolResultBlock",
            {
                "type": string(required=True, choices=("tool_result",)),
                "tool_use_id": string(required=True),
                "content": TEXTS,
                "is_error": boolean(False),
            },
            "In a user turn.",
        ),
        "thinking": Obj(
            "AnthropicThinkingBlock",
            {
                "type": string(required=True, choices=("thinking",)),
                "thinking": string(required=True),
                "signature": string(required=True),
            },
            "In an assistant turn.",
        ),
        "redacted_thinking": Obj(
            "AnthropicRedactedThinkingBlock",
            {"type": string(required=True, choices=("redacted_thinking",)), "data": string(required=True)},
            "In an assistant turn; skipped.",
        ),
        "tool_use": Obj(
            "AnthropicToolUseBlock",
            {
                "type": string(required=True, choices=("tool_use",)),
                "id": string(required=True),
                "name": string(required=True),
                "input": free_object(required=True),
            },
            "In an assistant turn.",
        ),
    },
)
MESSAGE = Obj(
    "AnthropicInputMessage",
    {
        "role": string(required=True, choices=("user", "assistant")),
        "content": either(array(BLOCK, MAX_CONTENT_PARTS, required=True), TEXT),
    },
)
TOOL = Obj(
    "AnthropicTool",
    {
        "type": string(default="custom", choices=("custom",)),
        "name": string("1-128 letters, digits, '_' or '-'.", required=True, pattern=f"^{TOOL_NAME.pattern}$"),
        **{key: FUNCTION_FIELDS[key] for key in ("description", "strict")},
        "input_schema": free_object("A JSON schema whose root is an object.", required=True),
    },
)
TOOL_CHOICE = Obj(
    "AnthropicToolChoice",
    {
        "type": string(required=True, choices=("auto", "any", "tool", "none")),
        "name": string("With type tool."),
        "disable_parallel_tool_use": boolean(False),
    },
)
THINKING = Variants(
    "type",
    {
        "enabled": Obj(
            "AnthropicThinkingEnabled",
            {
                "type": string(required=True, choices=("enabled",)),
                "budget_tokens": integer(1024, MAX_NEW_TOKENS, required=True),
            },
        ),
        "disabled": Obj("AnthropicThinkingDisabled", {"type": string(required=True, choices=("disabled",))}),
        "adaptive": Obj("AnthropicThinkingAdaptive", {"type": string(required=True, choices=("adaptive",))}),
    },
)
METADATA = Obj(
    "AnthropicMetadata",
    {"user_id": string("Labels the request (a string, as Anthropic's).")},
)
OUTPUT_FORMAT = Obj(
    "AnthropicOutputFormat",
    {"type": string(required=True, choices=("json_schema",)), "schema": free_object(required=True)},
)
OUTPUT_CONFIG = Obj(
    "AnthropicOutputConfig",
    {"effort": string(choices=("low", "medium", "high", "xhigh", "max")), "format": obj(OUTPUT_FORMAT)},
)
MESSAGES_FIELDS: dict[str, Field] = {
    "model": MODEL,
    "max_tokens": replace(MAX_TOKENS, required=True),
    "messages": array(MESSAGE, MAX_MESSAGES, required=True, min_items=1),
    "system": TEXTS,
    "mcp_servers": refused("not available on this gateway"),
    "container": refused("not available on this gateway"),
    "stop_sequences": array(
        STOP_STRING, MAX_STOP_SEQUENCES, "The answer ends before the first one (a list, as Anthropic's)."
    ),
    "temperature": number(0.0, 1.0, 1.0),
    "top_p": TOP_P,
    "top_k": integer(0, 1 << 30, doc="0: off."),
    "stream": STREAM,
    "metadata": obj(METADATA),
    "service_tier": string("Not used: one tier.", choices=("auto", "standard_only")),
    "tools": array(TOOL, MAX_TOOLS),
    "tool_choice": obj(TOOL_CHOICE),
    "thinking": obj(THINKING),
    "output_config": obj(OUTPUT_CONFIG),
}
MESSAGES = Obj("AnthropicMessagesRequest", MESSAGES_FIELDS)
MESSAGES_ONLY = (
    "max_tokens",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "stream",
    "metadata",
    "service_tier",
    "container",
)
"""The Messages fields count_tokens does not take (the anthropic SDK's MessageCountTokensParams, generated from its
OpenAPI spec, has model, messages, system, tools, tool_choice, thinking, output_config, cache_control, and no
max_tokens, stop_sequences, sampling, stream, metadata, service_tier or container): a 400 there, as Anthropic's API answers
("max_tokens: Extra inputs are not permitted": proxies strip max_tokens from count_tokens for it, e.g.
Wei-Shaw/sub2api#4913), so a client that counts with the body it will send learns that the count covers the prompt
alone."""
EXTRA_INPUT = "Extra inputs are not permitted"
COUNT_TOKENS = Obj(
    "AnthropicCountTokensRequest",
    {**MESSAGES_FIELDS, **dict.fromkeys(MESSAGES_ONLY, refused(f"{EXTRA_INPUT} (a Messages field)"))},
)


@dataclass
class MessagesRequest:
    model: str
    chat: ChatRequest
    settings: GenerationSettings


def parse_messages_request(body: Any, *, count_only: bool = False) -> MessagesRequest:
    """Validate a Messages body (`count_only`: a count_tokens body, no max_tokens); raises APIError (400)."""
    fields = Fields(body, COUNT_TOKENS if count_only else MESSAGES)
    model = parse_model(fields)
    fields.refuse("mcp_servers")
    if not count_only:
        fields.refuse("container")
    if count_only and (extra := fields.given(MESSAGES_ONLY)):
        raise invalid(EXTRA_INPUT, extra[0], "unsupported_parameter")  # Anthropic's: "max_tokens: Extra inputs ..."
    settings = GenerationSettings() if count_only else _settings(fields)
    tools = _tools(fields)
    tool_choice, parallel = _tool_choice(fields, tools)
    template_kwargs, effort = _thinking(fields, settings.max_tokens)
    if template_kwargs.get("thinking"):
        _check_thinking_compatible(fields, tool_choice)
    output = fields.obj("output_config")
    response_format, output_effort = _output_config(output) if output else (None, None)
    messages = _system(fields) + _messages(fields)
    prefill = _prefill(messages)
    chat = ChatRequest(
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        response_format=response_format,
        template_kwargs=template_kwargs,
        reasoning_effort=output_effort or effort,
        add_generation_prompt=not prefill,
        continue_final_message=prefill,
    )
    return MessagesRequest(model=model, chat=chat, settings=settings)


def _settings(fields: Fields) -> GenerationSettings:
    """How to generate: max_tokens, stop_sequences, the sampling settings, stream (metadata, service_tier checked)."""
    sampling = fields.read(_SAMPLING)
    top_p, top_k = backend_top_p_top_k(sampling["top_p"], sampling["top_k"])
    max_tokens = fields.integer("max_tokens")
    rest = fields.read(_AFTER_MAX_TOKENS)
    settings = GenerationSettings(max_tokens)  # the rest set after (keywords cost more)
    settings.stop, settings.temperature, settings.stream = (
        rest["stop_sequences"] or [],
        rest["temperature"],
        rest["stream"],
    )
    settings.top_p, settings.top_k = top_p, top_k
    return settings


def _stop_sequences(fields: Fields, key: str) -> list[str]:
    """`stop_sequences`: a list (Anthropic refuses a bare string), each holding more than whitespace; refused in
    Anthropic's words."""
    given = fields.get(key)
    if given is not None and not isinstance(given, list):
        raise invalid("Input should be a valid list", key)
    for i, stop in enumerate(fields.array(key) or ()):
        if stop == "":
            raise invalid("each stop sequence must be non-empty", f"{key}[{i}]")
        if isinstance(stop, str) and stop.isspace():
            raise invalid("each stop sequence must contain non-whitespace", f"{key}[{i}]")
    return parse_stop(fields, key)


def _metadata(fields: Fields, key: str) -> None:
    """`metadata`: it only labels the request, but Anthropic refuses a user_id of another type than a string."""
    fields.obj(key).string("user_id")


_SAMPLING = Reads(MESSAGES, {"top_p": Fields.number, "top_k": Fields.integer})
"""A Messages body's fields read first of its settings, then its max_tokens (required) ..."""
_AFTER_MAX_TOKENS = Reads(
    MESSAGES,
    {
        "stop_sequences": _stop_sequences,
        "temperature": Fields.number,
        "stream": Fields.boolean,
        "metadata": _metadata,
        "service_tier": Fields.string,  # one tier: checked as Anthropic's, not used
    },
)
"""... then these, in this order."""


def _prefill(messages: list[dict[str, Any]]) -> bool:
    """Whether the answer continues a last assistant turn of text (Anthropic's prefill); an empty one is dropped."""
    last = messages[-1]
    if last["role"] != "assistant" or "tool_calls" in last:
        return False
    if not last["content"]:
        if any(m["role"] != "system" for m in messages[:-1]):
            messages.pop()
        return False
    return True


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
    for b in f.items(key):
        _refuse_media(b)
        b.string("type")
        out.append(_block_text(b))
    return out


def _block_text(b: Fields) -> str:
    """A text block's text, which Anthropic requires to hold more than whitespace."""
    text = b.string("text")
    if not text:
        raise invalid("text content blocks must be non-empty", b.param("text"))
    if text.isspace():
        raise invalid(NOT_WHITESPACE, b.param("text"))
    return text


def _refuse_media(b: Fields) -> None:
    kind = b.value.get("type")
    if isinstance(kind, str) and kind in _UNSUPPORTED_BLOCKS:
        raise invalid(
            f"{_UNSUPPORTED_BLOCKS[kind]} inputs are not supported by this model", b.path, "unsupported_content"
        )


def _messages(fields: Fields) -> list[dict[str, Any]]:
    """The messages as chat messages, under Anthropic's rules. Consecutive messages of one role are one turn (as
    Anthropic combines them): each tool_result answers a tool_use of the assistant turn before and comes before the
    user turn's text, and every tool_use is answered in the user turn after it."""
    out: list[dict[str, Any]] = []
    turns = fields.items("messages")
    calls: set[str] = set()
    """The tool_use ids of the last assistant turn, and those the user turn after it answered so far."""
    answered: set[str] = set()
    used: set[str] = set()
    """Every tool_use id so far: Anthropic requires them unique in the conversation."""
    called_at = ""
    previous_role = None
    user_text = False
    """The user turn so far holds text (a tool_result may no longer come)."""
    for i, m in enumerate(turns):
        role = m.string("role")
        content = m.get("content")
        last = role == "assistant" and i == len(turns) - 1
        if content in ("", []) and not last:
            raise invalid(
                "all messages must have non-empty content except for the optional final assistant message",
                m.param("content"),
            )
        if isinstance(content, str) and content.isspace() and not last:  # a string is one text block
            raise invalid(NOT_WHITESPACE, m.param("content"))
        if role != previous_role:
            if role == "assistant" and previous_role == "user":
                _check_answered(calls - answered, called_at)
                calls, answered = set(), set()
            user_text = False
        if isinstance(content, str):
            turn = [{"role": role, "content": content}]
        else:
            parts = m.items("content")
            for b in parts:
                _refuse_media(b)
            parts = [b.variant() for b in parts]
            turn = _assistant(parts, used) if role == "assistant" else _user(parts, calls, answered, user_text)
            if last and parts and parts[-1].get("type") in ("thinking", "redacted_thinking"):
                # Anthropic's words; a prefill is text to continue: the thinking alone would be dropped unseen
                raise invalid("The final block in an assistant message cannot be `thinking`.", m.param("content"))
        if role == "assistant":
            ids = {c["id"] for c in turn[-1].get("tool_calls", ())}
            if ids:
                calls, called_at = calls | ids, m.param("content")
        else:
            user_text = user_text or turn[-1]["role"] == "user"
        text = turn[-1]["content"] or ""
        if last and text != text.rstrip():
            raise invalid("final assistant content cannot end with trailing whitespace", m.param("content"))
        out += turn
        previous_role = role
    if previous_role == "user":
        _check_answered(calls - answered, called_at)
    return out


def _check_answered(missing: set[str], called_at: str) -> None:
    """The tool_use ids of an assistant turn (at `called_at`) that the user turn after it left unanswered: a 400."""
    if missing:
        raise invalid(
            f"`tool_use` ids were found without `tool_result` blocks immediately after: {', '.join(sorted(missing))}. "
            "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
            called_at,
        )


def _user(blocks: list[Fields], calls: set[str], answered: set[str], after_text: bool) -> list[dict[str, Any]]:
    """A user message: each tool_result (answering one of `calls`, the tool_use ids of the assistant turn before,
    once: `answered` holds those the turn answered so far) as a tool message, then its text as one user message;
    `after_text`: earlier messages of the turn held text."""
    out: list[dict[str, Any]] = []
    for b in blocks:
        kind = b.string("type")
        if kind == "text":
            if out and out[-1]["role"] == "user":
                out[-1]["content"] += _block_text(b)
            else:
                out.append({"role": "user", "content": _block_text(b)})
        elif kind == "tool_result":
            call_id = b.string("tool_use_id")
            if call_id not in calls:
                raise invalid(
                    f"unexpected `tool_use_id` found in `tool_result` blocks: {call_id}. Each `tool_result` block "
                    "must have a corresponding `tool_use` block in the previous message.",
                    b.param("tool_use_id"),
                )
            if call_id in answered:
                raise invalid(
                    f"each tool_use must have a single result. Found multiple `tool_result` blocks with id: {call_id}",
                    b.param("tool_use_id"),
                )
            answered.add(call_id)
            if after_text or (out and out[-1]["role"] == "user"):
                raise invalid(
                    "tool_result blocks must come first: messages following tool_use blocks must begin with their "
                    "tool_result blocks, text after them",
                    b.path,
                )
            text = "".join(_texts(b, "content")) if b.has("content") else ""
            if b.boolean("is_error"):
                text = f"Error: {text}"
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        else:
            raise invalid(f"block type {kind!r} is not allowed in a user turn", b.param("type"))
    return out


def _assistant(blocks: list[Fields], used: set[str]) -> list[dict[str, Any]]:
    """An assistant turn: text, thinking and tool_use blocks as one message; `used`: the tool_use ids so far."""
    texts, thinking, calls = [], [], []
    for b in blocks:
        kind = b.string("type")
        if kind == "text":
            texts.append(_block_text(b))
        elif kind == "thinking":
            b.string("signature")  # required, as Anthropic's: a thinking block given back whole
            thinking.append(b.string("thinking"))
        elif kind == "redacted_thinking":
            b.string("data")  # required, as Anthropic's; encrypted by another provider: nothing this model can read
        elif kind == "tool_use":
            arguments = b.mapping("input")
            check_bounded(arguments, b.param("input"))
            call = {"name": b.string("name"), "arguments": dict(arguments)}
            call_id = b.string("id")
            if call_id in used:
                raise invalid("`tool_use` ids must be unique", b.param("id"))
            used.add(call_id)
            calls.append({"id": call_id, "type": "function", "function": call})
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
    for tool in fields.items("tools"):
        tool.string("type")
        tools.append({"type": "function", "function": function_spec(tool, tools, parameters_key="input_schema")})
    return tools


def _tool_choice(fields: Fields, tools: list[dict[str, Any]]) -> tuple[str | dict[str, Any], bool]:
    """Anthropic's auto / any / tool / none as chat's tool choice, and whether calls may be parallel."""
    tc = fields.obj("tool_choice")
    if tc is None:
        return "auto", True
    kind = tc.string("type")
    name = tc.string("name", required=kind == "tool")
    parallel = not tc.boolean("disable_parallel_tool_use")
    if kind in ("any", "tool") and not tools:
        raise invalid(f"tool_choice {kind!r} needs at least one tool in 'tools'", "tool_choice")
    if kind == "tool":
        if name not in [t["function"]["name"] for t in tools]:
            raise invalid(f"tool {name!r} is not declared in 'tools'", tc.param("name"))
        return {"type": "function", "function": {"name": name}}, parallel
    return {"any": "required"}.get(kind, kind), parallel


def _thinking(fields: Fields, max_tokens: int | None) -> tuple[dict[str, Any], str | None]:
    """`thinking` as the template switches families read, and a reasoning effort from its budget (which Anthropic
    requires to be below max_tokens)."""
    t = fields.obj("thinking")
    if t is None:
        return {}, None
    t = t.variant()
    kind = t.string("type")
    if kind == "disabled":
        return {"enable_thinking": False, "thinking": False}, None
    effort = "medium"
    if kind == "enabled":
        budget = t.integer("budget_tokens")
        if max_tokens is not None and budget >= max_tokens:
            raise invalid(
                f"'max_tokens' must be greater than 'thinking.budget_tokens' ({budget}), got {max_tokens}", "max_tokens"
            )
        effort = next((e for bound, e in THINKING_EFFORT if budget < bound), "high")
    return {"enable_thinking": True, "thinking": True}, effort


THINKING_MIN_TOP_P = 0.95


def _check_thinking_compatible(fields: Fields, tool_choice: str | dict[str, Any]) -> None:
    """Anthropic's rules with thinking on (enabled or adaptive): "Thinking isn't compatible with temperature or top_k
    modifications as well as forced tool use", and top_p only between 0.95 and 1 (its extended-thinking guide);
    each a 400 in its words as its API answers them."""
    if tool_choice not in ("auto", "none"):  # a forced call would skip the thinking the request asked for
        raise invalid("Thinking may not be enabled when tool_choice forces tool use.", "tool_choice")
    temperature = fields.get("temperature")
    if temperature is not None and temperature != 1:
        raise invalid("`temperature` may only be set to 1 when thinking is enabled or in adaptive mode.", "temperature")
    if fields.get("top_k") is not None:
        raise invalid("`top_k` must be unset when thinking is enabled.", "top_k")
    top_p = fields.get("top_p")
    if top_p is not None and top_p < THINKING_MIN_TOP_P:
        raise invalid(f"`top_p` must be between {THINKING_MIN_TOP_P} and 1 when thinking is enabled.", "top_p")


def _output_config(output: Fields) -> tuple[dict[str, Any] | None, str | None]:
    """`output_config`: a JSON schema the answer must follow (through chat's json_schema grammar) and an effort."""
    effort = output.string("effort")
    effort = "xhigh" if effort == "max" else effort
    fmt = output.obj("format")
    if fmt is None:
        return None, effort
    fmt.string("type")
    schema = fmt.get("schema")
    check_schema(schema, fmt.param("schema"), object_root=False)
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": True}}, effort
