"""Harmony prompts: chat requests rendered as gpt-oss's messages, the layout of its chat template / openai-harmony.

`<|start|>ROLE<|message|>…<|end|>` per message: a system message (identity,
knowledge cutoff, date, reasoning effort, the valid channels), a developer
message (the client's system/developer instructions, the `functions`
namespace in openai-harmony's TypeScript-like syntax, typescript.py, response formats), the conversation
(assistant reasoning on `analysis`, preambles on `commentary`, answers on
`final`, calls `to=functions.NAME` on `commentary` with content type
`json` as the template writes them, results from `functions.NAME
to=assistant`), then the generation prompt `<|start|>assistant`. Control
tokens are written spelled out; everything else is plain text.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from gateway.prompts.template import TemplateError
from gateway.types import ChatRequest

from .markers import ANALYSIS, CALL, CHANNEL, COMMENTARY, END, FINAL, MESSAGE, START
from .typescript import tool_namespace

IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
KNOWLEDGE_CUTOFF = "2024-06"
EFFORTS = ("low", "medium", "high")


def reasoning_effort(request: ChatRequest) -> str:
    """The Harmony reasoning level: template_kwargs `reasoning_effort`, else the request's, else "medium"."""
    effort = request.template_kwargs.get("reasoning_effort") or request.reasoning_effort or "medium"
    effort = {"minimal": "low", "none": "low", "xhigh": "high"}.get(effort, effort)
    if effort not in EFFORTS:
        raise TemplateError(f"gpt-oss supports reasoning_effort values {', '.join(EFFORTS)}; got {effort!r}")
    return effort


def message(role: str, body: str, channel: str | None = None, end: str = END) -> str:
    """One Harmony message; `role` may carry a recipient (`assistant to=functions.f`)."""
    header = role if channel is None else f"{role}{CHANNEL}{channel}"
    return f"{START}{header}{MESSAGE}{body}{end}"


def system_message(request: ChatRequest) -> str:
    date = request.template_kwargs.get("current_date") or datetime.now(UTC).strftime("%Y-%m-%d")
    lines = [
        request.template_kwargs.get("model_identity") or IDENTITY,
        f"Knowledge cutoff: {KNOWLEDGE_CUTOFF}",
        f"Current date: {date}",
        "",
        f"Reasoning: {reasoning_effort(request)}",
        "",
        "# Valid channels: analysis, commentary, final. Channel must be included for every message.",
    ]
    if request.tools:
        lines.append("Calls to these tools must go to the commentary channel: 'functions'.")
    return message("system", "\n".join(lines))


def response_formats(response_format: dict[str, Any] | None) -> str | None:
    """The `# Response Formats` section for a json_schema response_format."""
    if not response_format or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema") or {}
    out = f"# Response Formats\n\n## {spec.get('name') or 'response'}\n\n"
    if spec.get("description"):
        out += f"// {spec['description']}\n"
    return out + json.dumps(spec.get("schema") or {}, ensure_ascii=False)


def developer_message(request: ChatRequest, instructions: list[str]) -> str | None:
    sections: list[str] = []
    if instructions:
        sections.append("# Instructions\n\n" + "\n\n".join(instructions))
    if request.tools:
        sections.append("# Tools\n\n" + tool_namespace(request.tools))
    formats = response_formats(request.response_format)
    if formats:
        sections.append(formats)
    return message("developer", "\n\n".join(sections)) if sections else None


def assistant_messages(msg: dict[str, Any], keep_reasoning: bool) -> str:
    """A past assistant turn: reasoning (only while its tool-call chain is open), preamble or answer, calls."""
    out = ""
    if keep_reasoning and msg.get("reasoning_content"):
        out += message("assistant", msg["reasoning_content"], ANALYSIS)
    calls = msg.get("tool_calls") or []
    if msg.get("content"):
        out += message("assistant", msg["content"], COMMENTARY if calls else FINAL)
    for call in calls:
        fn = call["function"]
        arguments = fn.get("arguments")
        body = arguments if isinstance(arguments, str) else json.dumps(arguments or {}, ensure_ascii=False)
        out += message(f"assistant to=functions.{fn['name']}", body, f"{COMMENTARY} json", end=CALL)
    return out


def render_prompt(request: ChatRequest) -> str:
    """The Harmony prompt of `request`, ending with `<|start|>assistant` (or the continued final message)."""
    messages = request.messages
    instructions = [m.get("content") or "" for m in messages if m["role"] in ("system", "developer")]
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    continued = request.continue_final_message and bool(messages) and messages[-1]["role"] == "assistant"
    history = messages[:-1] if continued else messages
    out = system_message(request) + (developer_message(request, instructions) or "")
    calls: dict[str, str] = {}
    for i, msg in enumerate(history):
        role = msg["role"]
        if role == "user":
            out += message("user", msg.get("content") or "")
        elif role == "assistant":
            calls = {c.get("id") or "": c["function"]["name"] for c in msg.get("tool_calls") or []}
            out += assistant_messages(msg, keep_reasoning=i > last_user)
        elif role == "tool":
            name = msg.get("name") or calls.get(msg.get("tool_call_id") or "")
            if not name:
                raise TemplateError("a gpt-oss tool message needs a name or the id of an assistant tool call")
            out += message(f"functions.{name} to=assistant", msg.get("content") or "", COMMENTARY)
    if continued:
        last = messages[-1]
        channel = FINAL if last.get("content") else ANALYSIS
        out += (
            f"{START}assistant{CHANNEL}{channel}{MESSAGE}{last.get('content') or last.get('reasoning_content') or ''}"
        )
    elif request.add_generation_prompt:
        out += f"{START}assistant"
    return out
