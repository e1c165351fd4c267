"""Llama prompts: the checkpoint's chat template when it handles tools, else a native Llama 3.1 JSON-tools encoder.

The native layout (Meta's Llama 3.1 prompt format for custom tools, user-message
variant): a system turn with the knowledge cutoff and date, the tools as JSON
in the first user turn with the instruction to answer with
`{"name": …, "parameters": …}`, past calls written that way, tool results in
`ipython` turns, every turn closed by `<|eot_id|>`, then the generation prompt
`<|start_header_id|>assistant<|end_header_id|>\n\n`. It writes what Meta's published Llama 3.1 template writes
(tests/data/chat_templates/meta-llama-Llama-3.1-8B-Instruct.jinja, checked in tests/test_llama.py): `Environment:
ipython` in the system turn when tools are declared, every message's text trimmed, a tool result as a JSON string
(the template's `tojson`). Where that template raises, the encoder writes on: several calls in one turn are joined
with `; ` (the gateway's parser reads them so). Llama 4 checkpoints ship their own template; there is no native
Llama 4 encoder.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.prompts.template import TemplateError
from gateway.types import ChatRequest

from .markers import BEGIN_OF_TEXT, END_HEADER, EOT, START_HEADER

TOOLS_INSTRUCTION = (
    "Given the following functions, please respond with a JSON for a function call with its proper arguments that "
    'best answers the given prompt.\n\nRespond in the format {"name": function name, "parameters": dictionary of '
    "argument name and its value}.Do not use variables.\n\n"
)
DEFAULT_DATE = "26 Jul 2024"


def turn(role: str, body: str) -> str:
    return f"{START_HEADER}{role}{END_HEADER}\n\n{body}{EOT}"


def call_text(call: dict[str, Any]) -> str:
    """A past call as Llama 3 writes it."""
    fn = call["function"]
    arguments = fn.get("arguments")
    arguments = json.loads(arguments) if isinstance(arguments, str) else arguments or {}
    return json.dumps({"name": fn["name"], "parameters": arguments}, ensure_ascii=False)


def render_native(request: ChatRequest) -> str:
    """The Llama 3.1 prompt of `request` (JSON tool calls)."""
    messages = list(request.messages)
    system = ""
    if messages and messages[0]["role"] in ("system", "developer"):
        system = (messages.pop(0).get("content") or "").strip()
    date = request.template_kwargs.get("date_string") or DEFAULT_DATE
    tools = request.tools if request.tool_choice != "none" else []
    environment = "Environment: ipython\n" if tools else ""
    out = BEGIN_OF_TEXT + turn(
        "system", f"{environment}Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n{system}"
    )
    for msg in messages:
        role, content = msg["role"], (msg.get("content") or "").strip()
        if role == "user" and tools:
            listed = "".join(json.dumps(t, indent=4, ensure_ascii=False) + "\n\n" for t in tools)
            out += turn("user", TOOLS_INSTRUCTION + listed + content)
            tools = []
        elif role in ("user", "system", "developer"):
            out += turn("user" if role == "user" else "system", content)
        elif role == "assistant":
            calls = msg.get("tool_calls") or []
            out += turn("assistant", "; ".join(map(call_text, calls)) if calls else content)
        elif role == "tool":
            out += turn("ipython", json.dumps(msg.get("content") or "", ensure_ascii=False))
        else:
            raise TemplateError(f"Llama has no {role!r} role")
    if request.continue_final_message and messages and messages[-1]["role"] == "assistant":
        return out[: -len(EOT)]
    if request.add_generation_prompt:
        out += f"{START_HEADER}assistant{END_HEADER}\n\n"
    return out
