"""Kimi K3 prompts: chat requests rendered as XTML, the layout of Moonshot's `encoding_k3.py`.

Control tokens are written spelled out (`<|open|>`, `<|close|>`, `<|sep|>`,
`<|end_of_msg|>`); everything else — tag names, attribute pieces, message
text — is plain text that the gateway encodes with no added token matched.
The prompt is built as K3's segments and rendered as a `SegmentedText`, so
each piece is encoded on its own as K3 does: a tag name, then per attribute
` key`, `="`, the value and `"`. (Encoded as one region, the Kimi
pre-tokenizer would merge across those seams when a value begins or ends with
punctuation or ends with whitespace: `_id`, `$ref`, `a&quot;`, `x `.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.prompts.encoding import SegmentedText
from gateway.prompts.template import TemplateError
from gateway.types import ChatRequest

from .markers import CLOSE, END_OF_MSG, OPEN, SEP, escape_attr

EFFORTS = ("low", "high", "max")
"""The thinking efforts K3 knows; the served default is "max"."""

_OPENAI_EFFORT = {"low": "low", "medium": None, "high": "high", "xhigh": "max"}
"""OpenAI `reasoning_effort` → K3 effort; "medium" has no K3 equivalent and sends no directive."""


@dataclass(frozen=True)
class Thinking:
    """Whether the model thinks, and the effort directive it gets (None: no directive)."""

    enabled: bool
    effort: str | None


def thinking_of(request: ChatRequest) -> Thinking:
    """Thinking mode from template_kwargs `thinking` / `enable_thinking` / `thinking_effort` and `reasoning_effort`."""
    kwargs = request.template_kwargs
    enabled = kwargs.get("thinking", kwargs.get("enable_thinking", True)) is not False
    if request.reasoning_effort in ("none", "minimal"):
        enabled = False
    explicit = kwargs.get("thinking_effort")
    if explicit is not None:
        if explicit not in EFFORTS:
            raise TemplateError(f"Kimi K3 supports thinking_effort values {', '.join(EFFORTS)}; got {explicit!r}")
        return Thinking(enabled, explicit if enabled else None)
    effort = _OPENAI_EFFORT.get(request.reasoning_effort, "max") if request.reasoning_effort else "max"
    return Thinking(enabled, effort if enabled else None)


def open_channel(request: ChatRequest) -> str:
    """The channel the rendered prompt leaves open for the model: "think" or "response"."""
    if request.continue_final_message and request.messages and request.messages[-1].get("role") == "assistant":
        last = request.messages[-1]
        return "think" if thinking_of(request).enabled and not last.get("content") else "response"
    return "think" if thinking_of(request).enabled else "response"


Segments = list[str]
"""Prompt pieces in order, each encoded on its own (control-token spellings are pieces of their own)."""


def open_tag(name: str, *attributes: tuple[str, Any]) -> Segments:
    pieces = [OPEN, name]
    for key, value in attributes:
        pieces += [f" {key}", '="', escape_attr(str(value)), '"']
    return [*pieces, SEP]


def close_tag(name: str) -> Segments:
    return [CLOSE, name, SEP]


def message(body: Segments, *attributes: tuple[str, Any]) -> Segments:
    """One complete message: `<|open|>message …<|sep|>body<|close|>message<|sep|><|end_of_msg|>`."""
    return [*open_tag("message", *attributes), *body, *close_tag("message"), END_OF_MSG]


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def deep_sorted(value: Any) -> Any:
    """`value` with every object's keys sorted, recursively."""
    if isinstance(value, dict):
        return {k: deep_sorted(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [deep_sorted(v) for v in value]
    return value


def system_directive(kind: str, body: str) -> Segments:
    """An internal system message such as `type="tool-choice"`."""
    return message([body.strip()], ("role", "system"), ("type", kind))


def tool_declaration(tools: list[dict[str, Any]]) -> Segments:
    body = f"# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n{compact_json(deep_sorted(tools))}\n```"
    return system_directive("tool-declare", body)


def effort_directive(effort: str) -> Segments:
    return system_directive(
        "thinking-effort",
        "`thinking_effort` guides on how much to think in your thinking channel (not including the response "
        "channel), supported values include `low`, `medium`, `high`, and `max`.\n"
        f"Now the system is invoked with `thinking_effort={effort}`.",
    )


def tool_choice_directive(tool_choice: str | dict[str, Any]) -> Segments:
    if tool_choice == "required":
        return system_directive(
            "tool-choice",
            "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.",
        )
    if tool_choice == "none":
        return system_directive(
            "tool-choice",
            "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.",
        )
    return []


_RAW_JSON = "Your response must be raw JSON data without markdown code blocks (```json) or any additional formatting."


def response_format_directive(response_format: dict[str, Any] | None) -> Segments:
    kind = (response_format or {}).get("type")
    if kind == "json_object":
        return system_directive(
            "response-format", f"The system is invoked with `response_format=json_object`.\n{_RAW_JSON}"
        )
    if kind == "json_schema":
        schema = compact_json(deep_sorted(response_format.get("json_schema", {}).get("schema", {})))
        return system_directive(
            "response-format",
            f"The system is invoked with `response_format=json_schema`.\n{_RAW_JSON}\n"
            f"The JSON data must match the following schema:\n```json\n{schema}\n```",
        )
    return []


def xtml_type(value: Any) -> str:
    """The `type=` attribute of an argument value (integers are "number")."""
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array"


def xtml_value(value: Any) -> str:
    """An argument body: strings raw, everything else JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def tool_calls_block(tool_calls: list[dict[str, Any]]) -> Segments:
    block = open_tag("tools")
    for index, tool_call in enumerate(tool_calls, start=1):
        fn = tool_call["function"]
        block += open_tag("call", ("tool", fn["name"]), ("index", index))
        for key, value in fn.get("arguments", {}).items():
            block += [*open_tag("argument", ("key", key), ("type", xtml_type(value))), xtml_value(value)]
            block += close_tag("argument")
        block += close_tag("call")
    return block + close_tag("tools")


def assistant_body(msg: dict[str, Any], thinking: bool) -> Segments:
    """The channels of a past assistant message: think (thinking mode only), response, tools."""
    body: Segments = []
    if thinking:
        reasoning = msg.get("reasoning_content") or ""
        body += [*open_tag("think"), reasoning if reasoning.strip() else "", *close_tag("think")]
    body += [*open_tag("response"), msg.get("content") or "", *close_tag("response")]
    if msg.get("tool_calls"):
        body += tool_calls_block(msg["tool_calls"])
    return body


def continued_assistant(msg: dict[str, Any], channel: str, thinking: bool) -> Segments:
    """The final assistant message left open in `channel` for the model to continue."""
    head = open_tag("message", *_named(msg, "assistant"))
    reasoning = msg.get("reasoning_content") or ""
    if channel == "think":
        return [*head, *open_tag("think"), reasoning]
    if thinking:
        head += [*open_tag("think"), reasoning if reasoning.strip() else "", *close_tag("think")]
    return [*head, *open_tag("response"), msg.get("content") or ""]


def _named(msg: dict[str, Any], role: str) -> list[tuple[str, Any]]:
    return [("role", role)] + ([("name", msg["name"])] if msg.get("name") else [])


def ordered_tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each run of tool messages sorted into the order of the preceding assistant's tool_calls, by tool_call_id.

    A matched result takes its call's function name; a run with any unmatched id is left as it is.
    """
    out: list[dict[str, Any]] = []
    calls: dict[str, tuple[int, str]] = {}
    i = 0
    while i < len(messages):
        msg = messages[i]
        if msg.get("role") != "tool":
            if msg.get("role") == "assistant":
                calls = {}
                for position, call in enumerate(msg.get("tool_calls") or [], start=1):
                    calls.setdefault(str(call.get("id")), (position, call["function"]["name"]))
            out.append(msg)
            i += 1
            continue
        end = i
        while end < len(messages) and messages[end].get("role") == "tool":
            end += 1
        run = messages[i:end]
        matches = [calls.get(str(m.get("tool_call_id"))) for m in run]
        if all(matches):
            ranked = sorted(zip(matches, range(len(run)), run), key=lambda item: (item[0][0], item[1]))
            out += [{**m, "name": match[1]} for match, _, m in ranked]
        else:
            out += run
        i = end
    return out


def render_prompt(request: ChatRequest) -> SegmentedText:
    """The K3 prompt of `request`, ending with the generation prompt (or the continued final message)."""
    thinking = thinking_of(request)
    messages = ordered_tool_results(request.messages)
    continued = request.continue_final_message and bool(messages) and messages[-1].get("role") == "assistant"
    history = messages[:-1] if continued else messages
    parts = tool_declaration(request.tools) if request.tools else []
    if thinking.effort:
        parts += effort_directive(thinking.effort)
    tool_calls: list[dict[str, Any]] = []
    tool_index = 0
    for msg in history:
        role = msg["role"]
        if role in ("user", "system", "developer"):
            parts += message([msg.get("content") or ""], *_named(msg, "user" if role == "user" else "system"))
        elif role == "assistant":
            tool_calls, tool_index = msg.get("tool_calls") or [], 0
            parts += message(assistant_body(msg, thinking.enabled), *_named(msg, "assistant"))
        elif role == "tool":
            tool_index += 1
            name = msg.get("name") or _positional_name(tool_calls, tool_index)
            parts += message([msg.get("content") or ""], ("role", "tool"), ("tool", name), ("index", tool_index))
    parts += tool_choice_directive(request.tool_choice)
    parts += response_format_directive(request.response_format)
    if continued:
        parts += continued_assistant(messages[-1], open_channel(request), thinking.enabled)
    elif request.add_generation_prompt:
        parts += [*open_tag("message", ("role", "assistant")), *open_tag("think" if thinking.enabled else "response")]
    return SegmentedText(parts)


def _positional_name(tool_calls: list[dict[str, Any]], index: int) -> str:
    if index <= len(tool_calls):
        return tool_calls[index - 1]["function"]["name"]
    raise TemplateError("a Kimi K3 tool message needs a name or a matching assistant tool call")
