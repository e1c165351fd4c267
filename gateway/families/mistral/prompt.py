"""Mistral prompts: the checkpoint's chat template when it handles tools, else a native encoder (tokenizer v13 layout).

Native layout, as mistral-common's v13 instruct tokenizer lays out a request
(no call ids): `<s>`, each system message where it stands in
`[SYSTEM_PROMPT]…[/SYSTEM_PROMPT]`, the tools as one JSON list in
`[AVAILABLE_TOOLS]…[/AVAILABLE_TOOLS]` before the first user turn (v11 put
them before the last), user turns in `[INST]…[/INST]`, assistant reasoning in
`[THINK]…[/THINK]` (kept only after the last user turn), answers and
`[TOOL_CALLS]NAME[ARGS]{…}` calls closed by `</s>`, tool results in
`[TOOL_RESULTS]…[/TOOL_RESULTS]`. The generation prompt is the last `[/INST]`
(or tool result). Control tokens are written spelled out.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.prompts.template import TemplateError
from gateway.types import ChatRequest

from .markers import (
    ARGS,
    AVAILABLE_TOOLS,
    AVAILABLE_TOOLS_END,
    BOS,
    EOS,
    INST,
    INST_END,
    SYSTEM_PROMPT,
    SYSTEM_PROMPT_END,
    THINK,
    THINK_END,
    TOOL_CALLS,
    TOOL_RESULTS,
    TOOL_RESULTS_END,
)


def calls_text(calls: list[dict[str, Any]]) -> str:
    out = ""
    for call in calls:
        fn = call["function"]
        arguments = fn.get("arguments")
        body = arguments if isinstance(arguments, str) else json.dumps(arguments or {}, ensure_ascii=False)
        out += f"{TOOL_CALLS}{fn['name']}{ARGS}{body}"
    return out


def render_native(request: ChatRequest) -> str:
    """The v13 Mistral prompt of `request` (mistral-common's `InstructTokenizerV13`)."""
    messages = request.messages
    first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), -1)
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    tools = request.tools if request.tool_choice != "none" else []
    out = BOS
    for i, msg in enumerate(messages):
        role, content = msg["role"], msg.get("content") or ""
        if role in ("system", "developer"):
            out += f"{SYSTEM_PROMPT}{content}{SYSTEM_PROMPT_END}"
        elif role == "user":
            if i == first_user and tools:
                out += AVAILABLE_TOOLS + json.dumps(tools, ensure_ascii=False) + AVAILABLE_TOOLS_END
            out += f"{INST}{content}{INST_END}"
        elif role == "assistant":
            if i > last_user and msg.get("reasoning_content"):
                out += f"{THINK}{msg['reasoning_content']}{THINK_END}"
            out += content + calls_text(msg.get("tool_calls") or [])
            if not (request.continue_final_message and i == len(messages) - 1):
                out += EOS
        elif role == "tool":
            out += f"{TOOL_RESULTS}{content}{TOOL_RESULTS_END}"
        else:
            raise TemplateError(f"Mistral has no {role!r} role")
    return out
