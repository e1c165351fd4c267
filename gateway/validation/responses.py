"""Validation of a /v1/responses body: input items in one canonical form, tools, formats and settings.

The canonical items are what the store keeps and `input_items` lists; `items_to_messages` turns them
(and a previous response's items) into the chat messages every family renders.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.errors import invalid
from gateway.grammars.ecma_patterns import PatternSearch
from gateway.grammars.unenforced import strict_able
from gateway.ids import item_id
from gateway.validation.chat import (
    FUNCTION_CALL,
    FUNCTION_FIELDS,
    JSON_SCHEMA_FIELDS,
    MAX_CONTENT_PARTS,
    MAX_MESSAGES,
    MAX_TOOLS,
    REASONING_EFFORTS,
    TEXT,
    TOOL_CHOICE_MODES,
    format_variants,
    json_schema_format,
    parse_arguments,
    parse_tool_choice,
    parse_tools,
)
from gateway.validation.cut_json import completed_members
from gateway.validation.declare import Obj, Variants, array, boolean, either, free_object, integer, obj, refused, string
from gateway.validation.fields import (
    MAX_NEW_TOKENS,
    METADATA,
    MODEL,
    PENALTY,
    STREAM,
    TEMPERATURE,
    TOP_K,
    TOP_LOGPROBS,
    TOP_P,
    Fields,
    GenerationSettings,
    Reads,
    backend_top_p_top_k,
    parse_metadata,
    parse_model,
)

MIN_OUTPUT_TOKENS = 16
"""OpenAI's least max_output_tokens."""
MAX_LIST = 100
"""Input items per page."""
MAX_INCLUDE = 16
INCLUDABLE = ("message.output_text.logprobs", "reasoning.encrypted_content")
"""`include` values that apply here (reasoning items always carry their text; nothing is encrypted)."""
_ROLES = ("user", "system", "developer", "assistant")
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal", "summary_text": "text"}
_UNSUPPORTED_PARTS = {"input_image": "image", "input_file": "file", "input_audio": "audio"}

TOOL = Obj("ResponsesTool", {"type": string(required=True, choices=("function",)), **FUNCTION_FIELDS})
NAMED = Obj("ResponsesNamedTool", {"type": string(choices=("function",)), "name": string(required=True)})
TOOL_CHOICE = Variants(
    "type",
    {
        "function": Obj(
            "ResponsesToolChoiceFunction",
            {"type": string(required=True, choices=("function",)), "name": string(required=True)},
        ),
        "allowed_tools": Obj(
            "ResponsesToolChoiceAllowedTools",
            {
                "type": string(required=True, choices=("allowed_tools",)),
                "mode": string(default="auto", choices=("auto", "required")),
                "tools": array(NAMED, MAX_TOOLS, required=True, min_items=1),
            },
        ),
    },
)
TEXT_FORMAT = format_variants(
    "ResponsesTextFormat",
    {**JSON_SCHEMA_FIELDS, "schema": free_object("A JSON schema (required here, unlike chat's).", required=True)},
)
VERBOSITY = ("low", "medium", "high")
TEXT_OPTIONS = Obj(
    "ResponsesText",
    {
        "format": obj(TEXT_FORMAT),
        "verbosity": string(
            "Repeated in the Response (the prompt is not changed by it).", default="medium", choices=VERBOSITY
        ),
    },
)
REASONING = Obj(
    "ResponsesReasoning",
    {"effort": string(choices=REASONING_EFFORTS), "summary": string(choices=("auto", "concise", "detailed"))},
)
PART = Variants(
    "type",
    {
        kind: Obj(
            f"Responses{kind.title().replace('_', '')}Part",
            {"type": string(required=True, choices=(kind,)), key: string(required=True)},
        )
        for kind, key in _TEXT_PARTS.items()
    },
)
PARTS = either(array(PART, MAX_CONTENT_PARTS, required=True), TEXT)
REASONING_PART = Obj("ResponsesReasoningPart", {"text": string(required=True)}, "Its type is not read.")
ITEM_ID = string("Given: kept; default: a new id.")
MESSAGE_ITEM = Obj(
    "ResponsesMessageItem",
    {
        "type": string(default="message", choices=("message",)),
        "id": ITEM_ID,
        "role": string(required=True, choices=_ROLES),
        "content": PARTS,
    },
)
FUNCTION_CALL_ITEM = Obj(
    "ResponsesFunctionCallItem",
    {
        "type": string(required=True, choices=("function_call",)),
        "id": ITEM_ID,
        "call_id": string(required=True),
        "name": FUNCTION_CALL.fields["name"],
        "arguments": FUNCTION_CALL.fields["arguments"],
    },
)
FUNCTION_OUTPUT_ITEM = Obj(
    "ResponsesFunctionCallOutputItem",
    {
        "type": string(required=True, choices=("function_call_output",)),
        "id": ITEM_ID,
        "call_id": string(required=True),
        "output": PARTS,
    },
)
REASONING_ITEM = Obj(
    "ResponsesReasoningItem",
    {
        "type": string(required=True, choices=("reasoning",)),
        "id": ITEM_ID,
        "summary": array(REASONING_PART, MAX_CONTENT_PARTS, required=True),
        "content": array(REASONING_PART, MAX_CONTENT_PARTS),
    },
)
ITEM_REFERENCE = Obj(
    "ResponsesItemReference",
    {"type": string(required=True, choices=("item_reference",)), "id": string(required=True)},
    "An item of a stored response, by its id.",
)
INPUT_ITEM = Variants(
    "type",
    {
        "message": MESSAGE_ITEM,
        "function_call": FUNCTION_CALL_ITEM,
        "function_call_output": FUNCTION_OUTPUT_ITEM,
        "reasoning": REASONING_ITEM,
        "item_reference": ITEM_REFERENCE,
    },
    default="message",
)
INPUT_ITEMS_QUERY = Obj(
    "InputItemsQuery",
    {
        "order": string("Oldest first (asc) or newest first.", default="desc", choices=("asc", "desc")),
        "limit": integer(1, MAX_LIST, 20),
        "after": string("An item id: the page starts after it."),
    },
)
RETRIEVE_QUERY = Obj(
    "RetrieveQuery",
    {
        "stream": string(
            "'true' is refused: OpenAI streams a stored response again only in background mode, which is not served.",
            default="false",
            choices=("true", "false"),
        )
    },
)
RESPONSES = Obj(
    "ResponsesRequest",
    {
        "model": MODEL,
        "input": either(array(INPUT_ITEM, MAX_MESSAGES, required=True), TEXT),
        "instructions": string("A system message before the input."),
        "background": refused("background responses are not available", unless=False),
        "conversation": refused("use 'previous_response_id' to continue a conversation"),
        "prompt": refused("stored prompt templates are not available"),
        "truncation": string(
            "'auto' is refused: the input is never truncated.", default="disabled", choices=("disabled", "auto")
        ),
        "include": array({"type": "string", "enum": list(INCLUDABLE)}, MAX_INCLUDE),
        "tools": array(TOOL, MAX_TOOLS),
        "tool_choice": either(obj(TOOL_CHOICE), {"type": "string", "enum": list(TOOL_CHOICE_MODES)}),
        "parallel_tool_calls": boolean(True),
        "text": obj(TEXT_OPTIONS),
        "reasoning": obj(REASONING),
        "max_output_tokens": integer(MIN_OUTPUT_TOKENS, MAX_NEW_TOKENS, doc="At least 16, as OpenAI's."),
        "temperature": TEMPERATURE,
        "top_p": TOP_P,
        "top_k": TOP_K,
        "frequency_penalty": PENALTY,
        "presence_penalty": PENALTY,
        "top_logprobs": TOP_LOGPROBS,
        "stream": STREAM,
        "store": boolean(True, "Keep the response for GET, input_items and previous_response_id."),
        "previous_response_id": string("Continue after this stored response."),
        "metadata": METADATA,
        # not acted on here, but a Response repeats them as sent
        "max_tool_calls": integer(0, MAX_NEW_TOKENS, doc="Calls to built-in tools at most (none is served here)."),
        "prompt_cache_key": string("Repeated in the Response (the prefix cache needs no key)."),
        "prompt_cache_retention": string(
            "Repeated in the Response (the backends' prefix cache keeps what it can).", choices=("in_memory", "24h")
        ),
        "safety_identifier": string("Repeated in the Response."),
        "user": string("Repeated in the Response."),
    },
)
_REPEATED = ("prompt_cache_key", "prompt_cache_retention", "safety_identifier", "user")
"""String fields a Response repeats as the request gave them."""


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


def parse_responses_request(body: Any) -> ResponsesRequest:
    """Validate a Responses create body; raises APIError (400) naming the bad param."""
    fields = Fields(body, RESPONSES)
    model = parse_model(fields)
    truncation = fields.read(_OPENING)["truncation"]
    if truncation == "auto":
        raise invalid("'truncation' 'auto' is not supported: the input is never truncated", "truncation")
    include = _include(fields)
    tools = parse_tools(fields, flat=True)
    tool_choice, active = parse_tool_choice(fields, tools, flat=True)
    text = fields.obj("text")
    response_format, text_echo = _text_format(text)
    text_echo["verbosity"] = text.string("verbosity") if text else "medium"  # OpenAI's Response states it
    reasoning = fields.obj("reasoning")
    effort = reasoning.string("effort") if reasoning else None
    summary = reasoning.string("summary") if reasoning else None
    sampling = fields.read(_SAMPLING)
    top_p, top_k = backend_top_p_top_k(sampling["top_p"], sampling["top_k"])
    settings = GenerationSettings(sampling["max_output_tokens"])  # the rest set after (keywords cost more)
    settings.temperature, settings.top_p, settings.top_k = sampling["temperature"], top_p, top_k
    settings.frequency_penalty, settings.presence_penalty = sampling["frequency_penalty"], sampling["presence_penalty"]
    settings.logprobs, settings.top_logprobs = "message.output_text.logprobs" in include, sampling["top_logprobs"]
    settings.stream = sampling["stream"]
    items = parse_input(fields)
    closing = fields.read(_CLOSING)
    request = ResponsesRequest(
        model=model,
        items=items,
        instructions=closing["instructions"],
        tools=active,
        tool_choice=tool_choice,
        parallel_tool_calls=sampling["parallel_tool_calls"],
        response_format=response_format,
        reasoning_effort=effort,
        settings=settings,
        store=closing["store"],
        previous_response_id=closing["previous_response_id"],
        metadata=closing["metadata"] or {},
        include=include,
    )
    search = PatternSearch()  # the tools' listed values searched within one budget
    request.echo = {
        "tools": [_tool_echo(t, search) for t in tools],
        "tool_choice": fields.get("tool_choice") or "auto",
        "text": text_echo,
        "reasoning": {"effort": effort, "summary": summary},
        "truncation": truncation,
        "temperature": settings.temperature,
        "top_p": sampling["top_p"],
        "top_logprobs": settings.top_logprobs,
        "max_output_tokens": settings.max_tokens,
        "frequency_penalty": settings.frequency_penalty,
        "presence_penalty": settings.presence_penalty,
        "max_tool_calls": closing["max_tool_calls"],
        **{key: closing[key] for key in _REPEATED},
    }
    return request


_OPENING = Reads(
    RESPONSES, {**dict.fromkeys(("background", "conversation", "prompt"), Fields.refuse), "truncation": Fields.string}
)
"""A Responses body's fields read first (after its model), in this order."""
_SAMPLING = Reads(
    RESPONSES,
    {
        "top_p": Fields.number,
        "top_k": Fields.integer,
        "max_output_tokens": Fields.integer,
        "temperature": Fields.number,
        "frequency_penalty": Fields.number,
        "presence_penalty": Fields.number,
        "top_logprobs": Fields.integer,
        "stream": Fields.boolean,
        "parallel_tool_calls": Fields.boolean,
    },
)
"""Its settings, read after its tools and formats."""
_CLOSING = Reads(
    RESPONSES,
    {
        "instructions": Fields.string,
        "store": Fields.boolean,
        "previous_response_id": Fields.string,
        "metadata": parse_metadata,  # (None when left out)
        "max_tool_calls": Fields.integer,
        **dict.fromkeys(_REPEATED, Fields.string),
    },
)
"""Its fields read after its input."""


def parse_input(fields: Fields) -> list[dict[str, Any]]:
    """`input`: a string (one user message) or an array of items, each made canonical."""
    v = fields.get("input")
    if isinstance(v, str):
        return [_message_item("user", [{"type": "input_text", "text": v}])]
    raw = fields.array("input")
    if all(type(item) is dict for item in raw):  # (else `items` names the first that is no object, before any is read)
        plain = list(map(_plain_item, raw))
        return [item or _item(fields.item("input", i).variant()) for i, item in enumerate(plain)]
    return [_item(item.variant()) for item in fields.items("input")]


def _plain_item(item: dict[str, Any]) -> dict[str, Any] | None:
    """A message item of a role and a content of text (and its type, "message"), as `_item` reads it, without its
    field-by-field reads; None for any other item."""
    if len(item) != 2 and (len(item) != 3 or item.get("type") != "message"):
        return None
    role = item.get("role")
    if type(role) is not str or role not in _ROLES:
        return None
    texts = _plain_texts(item.get("content"))
    return None if texts is None else _message_item(role, _as_parts(texts, _TEXT_TYPE[role]))


_TEXT_TYPE = {"assistant": "output_text"} | dict.fromkeys(("user", "system", "developer"), "input_text")
"""The type of a message's text parts by its role."""


def _plain_texts(content: Any) -> list[str] | None:
    """The texts of a string content, or of input_text / output_text parts each with a string text, as `_parts`
    reads them; None for any other content."""
    if type(content) is str:
        return [content]
    if type(content) is not list or len(content) > MAX_CONTENT_PARTS:
        return None
    texts = []
    for part in content:
        if type(part) is not dict or part.get("type") not in ("input_text", "output_text"):
            return None
        text = part.get("text")
        if type(text) is not str:
            return None
        texts.append(text)
    return texts


def _item(f: Fields) -> dict[str, Any]:
    kind = f.string("type")
    if kind == "message":
        role = f.string("role")
        parts = _parts(f, "content", _TEXT_TYPE[role])
        return _message_item(role, parts, f.string("id"))
    if kind == "function_call":
        name = f.string("name")
        arguments = parse_arguments(f)
        raw = f.get("arguments")
        return {
            "type": "function_call",
            "id": f.string("id") or item_id("fc"),
            "call_id": f.string("call_id"),
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
            "call_id": f.string("call_id"),
            "output": text,
            "status": "completed",
        }
    if kind == "item_reference":
        return {"type": "item_reference", "id": f.string("id")}  # resolved from the store before anything reads it
    if kind == "reasoning":
        out: dict[str, Any] = {
            "type": "reasoning",
            "id": f.string("id") or item_id("rs"),
            "summary": _reasoning_parts(f, "summary", "summary_text"),
        }
        if f.has("content"):
            out["content"] = _reasoning_parts(f, "content", "reasoning_text")
        return out


def _message_item(role: str, content: list[dict[str, Any]], given_id: str | None = None) -> dict[str, Any]:
    return {
        "type": "message",
        "id": given_id or item_id("msg"),
        "role": role,
        "content": content,
        "status": "completed",
    }


def _parts(f: Fields, key: str, text_type: str) -> list[dict[str, Any]]:
    """A message's content (a string or text parts) as parts of `text_type`."""
    v = f.get(key)
    return _as_parts([v] if isinstance(v, str) else [_part_text(p) for p in f.items(key)], text_type)


def _as_parts(texts: list[str], text_type: str) -> list[dict[str, Any]]:
    """Texts as content parts of `text_type`."""
    if text_type == "output_text":
        return [{"type": "output_text", "text": t, "annotations": []} for t in texts]
    return [{"type": text_type, "text": t} for t in texts]


def _part_text(p: Fields) -> str:
    kind = p.get("type")
    if isinstance(kind, str) and kind in _UNSUPPORTED_PARTS:
        raise invalid(
            f"{_UNSUPPORTED_PARTS[kind]} inputs are not supported by this model", p.path, "unsupported_content"
        )
    p = p.variant()
    return p.string(_TEXT_PARTS[p.string("type")])


def _reasoning_parts(f: Fields, key: str, part_type: str) -> list[dict[str, Any]]:
    return [{"type": part_type, "text": p.string("text")} for p in f.items(key)]


def check_call_outputs(
    history: list[dict[str, Any]], previous_output: list[dict[str, Any]], items: list[dict[str, Any]]
) -> None:
    """OpenAI's rules for the input: each function_call_output answers a function_call before it (in the input or
    the previous responses' history), and a function_call (of the input, or the previous response's output) is
    answered before a user, system or developer message follows it (the assistant's own text may). A call is
    answered once, as chat's tool messages answer each call once (a second output would reach the model as another
    result of the same call; OpenAI's wording for Responses not confirmed: chat's words)."""
    calls = {item["call_id"]: True for item in history if item["type"] == "function_call"}
    """call_id → answered; the earlier turns' calls count as answered (their order was checked when they came)."""
    calls.update((item["call_id"], False) for item in previous_output if item["type"] == "function_call")
    answered_at: dict[str, str] = {}
    """call_id → where the output that answered it is (the earlier turns' outputs too), until the id is called again."""
    for item in history:
        if item["type"] == "function_call_output":
            answered_at[item["call_id"]] = "an earlier turn"
        elif item["type"] == "function_call":
            answered_at.pop(item["call_id"], None)
    for item in previous_output:
        if item["type"] == "function_call":
            answered_at.pop(item["call_id"], None)
    for i, item in enumerate(items):
        kind = item["type"]
        if kind == "function_call":
            calls[item["call_id"]] = False
            answered_at.pop(item["call_id"], None)
        elif kind == "function_call_output":
            call_id = item["call_id"]
            if call_id not in calls:
                raise invalid(
                    f"No tool call found for function call output with call_id {call_id}.", f"input[{i}].call_id"
                )
            if call_id in answered_at:
                raise invalid(
                    f"Invalid parameter: Duplicate value for 'call_id' of '{call_id}' in {answered_at[call_id]} and "
                    f"input[{i}].",
                    f"input[{i}].call_id",
                )
            calls[call_id] = True
            answered_at[call_id] = f"input[{i}]"
        elif kind == "message" and item["role"] != "assistant":
            open_calls = [call_id for call_id, answered in calls.items() if not answered]
            if open_calls:
                raise invalid(f"No tool output found for function call {open_calls[0]}.", f"input[{i}]")


def check_reasoning_followed(items: list[dict[str, Any]]) -> None:
    """OpenAI's rule: a reasoning item comes with the output that followed it (an assistant message or a function
    call, after any more reasoning): "Item 'rs_…' of type 'reasoning' was provided without its required following
    item." (openai-node#1567, openai-agents-js#326). Alone at the end it would be dropped, before a user message
    it would join a later turn."""
    waiting: tuple[int, str] | None = None
    """The first reasoning item not followed yet: its index and id."""
    for i, item in enumerate(items):
        kind = item["type"]
        if kind == "reasoning":
            waiting = waiting or (i, item["id"])
        elif kind == "function_call" or (kind == "message" and item["role"] == "assistant"):
            waiting = None
        elif waiting is not None:
            break
    if waiting is not None:
        at, rid = waiting
        raise invalid(
            f"Item '{rid}' of type 'reasoning' was provided without its required following item.", f"input[{at}]"
        )


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
            reasoning = []  # a stored response's reasoning that no output followed (cut short) joins no later turn
            continue
        if kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": "".join(p["text"] for p in item["content"])})
            if role != "assistant":
                reasoning = []
        else:  # function_call
            if not messages or messages[-1]["role"] != "assistant":
                messages.append({"role": "assistant", "content": None})
            # a stored function call that max_output_tokens cut keeps its completed arguments
            call = {"name": item["name"], "arguments": completed_members(item["arguments"] or "{}")}
            messages[-1].setdefault("tool_calls", []).append(
                {"id": item["call_id"], "type": "function", "function": call}
            )
        if reasoning and messages[-1]["role"] == "assistant":
            before = messages[-1].get("reasoning_content")  # reasoning between the turn's text and its calls
            messages[-1]["reasoning_content"] = "\n".join([before, *reasoning] if before else reasoning)
            reasoning = []
    return messages


def _text_format(text: Fields | None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """`text.format` as chat's response_format, and the `text` a Response repeats."""
    fmt = text.obj("format") if text else None
    if fmt is None:
        return None, {"format": {"type": "text"}}
    fmt = fmt.variant()
    kind = fmt.string("type")
    if kind == "text":
        return None, {"format": {"type": "text"}}
    if kind == "json_object":
        return {"type": "json_object"}, {"format": {"type": "json_object"}}
    spec = json_schema_format(fmt)
    # a Response repeats the description as null when none was given (OpenAI's, and OpenResponses requires it)
    echo = {"type": "json_schema", "description": None, **spec}
    return {"type": "json_schema", "json_schema": spec}, {"format": echo}


def _tool_echo(tool: dict[str, Any], search: PatternSearch) -> dict[str, Any]:
    fn = tool["function"]
    return {
        "type": "function",
        "name": fn["name"],
        "description": fn.get("description"),
        "parameters": fn["parameters"],
        "strict": fn["strict"] if "strict" in fn else strict_able(tool, search),  # omitted: strict where it can be
    }


def _include(fields: Fields) -> list[str]:
    raw = fields.array("include") or []
    for i, value in enumerate(raw):
        if value not in INCLUDABLE:
            raise invalid(
                f"'include[{i}]' {value!r} does not apply here; allowed: {', '.join(map(repr, INCLUDABLE))}",
                f"include[{i}]",
            )
    return list(raw)
