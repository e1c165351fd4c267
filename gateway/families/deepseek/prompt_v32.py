"""Native DeepSeek V3.2 prompt encoder (the model ships Python `encoding_dsv32`, not a Jinja template).

Layout: BOS; the system turn (an empty one when the conversation has none) is
its content + `\\n\\n## Tools …` (one JSON object per tool and line, inside
`<functions>`) + `\\n\\n## Response Format:`; every user turn is
`<｜User｜>…<｜Assistant｜>` then `<think>` (thinking, last user turn) or
`</think>`; a developer turn is a user turn holding the declarations and
`# The user's message is: …`; tool results follow their assistant turn as
`\\n\\n<function_results>` + `\\n<result>…</result>` per call +
`\\n</function_results>\\n\\n` and `<think>` / `</think>`; assistant turns are
(reasoning + `</think>` after the last user turn, thinking only) + content +
`\\n\\n` + `<｜DSML｜function_calls>` block + EOS. In thinking mode, assistant
turns before the last user turn lose their reasoning and developer turns go.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.grammars.json import response_schema
from gateway.types import ChatRequest

from .markers import ASSISTANT, BOS, EOS, THINK_END, THINK_START, USER, V32
from .prompt import continues_final, render_calls, render_prefill

_TOOLS = f"""## Tools

You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "{V32.calls_open}" block like the following as part of your reply to the user:
{V32.calls_open}
{V32.invoke_open("$FUNCTION_NAME")}
{V32.parameter_named}$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE{V32.parameter_close}
...
{V32.invoke_close}
{V32.invoke_open("$FUNCTION_NAME2")}
...
{V32.invoke_close}
{V32.calls_close}

String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).

If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:

{V32.calls_open}
...
{V32.calls_close}

<function_results>
...
</function_results>

{THINK_START}...thinking about results{THINK_END}

Here are the functions available in JSONSchema format:
<functions>
{{schemas}}
</functions>
"""
_RESPONSE_FORMAT = "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{schema}"
_ASKS = ("user", "developer")


def render_prompt_v32(request: ChatRequest, thinking: bool) -> str:
    """The full V3.2 prompt of `request`; control tokens appear spelled out."""
    messages = list(request.messages)
    prefill = messages.pop() if continues_final(request) else None
    if not messages or messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": ""})
    tools = request.tools if request.tool_choice != "none" else []
    declarations = _declarations(tools, response_schema(request.response_format))
    last_user = _last_user(messages)
    if thinking:
        messages = [
            m if m["role"] in ("user", "system", "tool") or i >= last_user else {**m, "reasoning_content": None}
            for i, m in enumerate(messages)
            if m["role"] != "developer" or i >= last_user
        ]
        last_user = _last_user(messages)
    out = [BOS]
    for index, message in enumerate(messages):
        opens = thinking and index >= last_user
        out.append(_render(index, messages, declarations if index == 0 else "", opens, thinking and index > last_user))
    if prefill is not None:
        out.append(render_prefill(prefill, thinking))
    return "".join(out)


def _declarations(tools: list[dict[str, Any]], schema: dict[str, Any] | None) -> str:
    blocks = []
    if tools:
        blocks.append(_TOOLS.format(schemas="\n".join(_json(t["function"]) for t in tools)))
    if schema is not None:
        blocks.append(_RESPONSE_FORMAT.format(schema=_json(schema)))
    return "".join("\n\n" + block for block in blocks)


def _render(index: int, messages: list[dict[str, Any]], declarations: str, opens: bool, keeps_reasoning: bool) -> str:
    message = messages[index]
    role, content = message["role"], message.get("content") or ""
    think = THINK_START if opens else THINK_END
    if role == "system":
        return content + declarations
    if role == "user":
        return f"{USER}{content}{ASSISTANT}{think}"
    if role == "developer":
        return f"{USER}{declarations}\n\n# The user's message is: {content}{ASSISTANT}{think}"
    if role == "tool":
        first = index == 0 or messages[index - 1]["role"] != "tool"
        last = index == len(messages) - 1 or messages[index + 1]["role"] != "tool"
        return (
            ("\n\n<function_results>" if first else "")
            + f"\n<result>{content}</result>"
            + (f"\n</function_results>\n\n{think}" if last else "")
        )
    if role == "assistant":
        reasoning = (message.get("reasoning_content") or "") + THINK_END if keeps_reasoning else ""
        calls = message.get("tool_calls")
        return reasoning + content + ("\n\n" + render_calls(calls, V32) if calls else "") + EOS
    raise ValueError(f"deepseek_v32 cannot render role {role!r}")


def _last_user(messages: list[dict[str, Any]]) -> int:
    return max((i for i, m in enumerate(messages) if m["role"] in _ASKS), default=-1)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
