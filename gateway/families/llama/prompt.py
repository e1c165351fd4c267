"""Llama prompts: the checkpoint's chat template when it handles tools, else a native Llama 3.1 JSON-tools encoder.

The native encoder writes what Meta's Llama 3.1 chat template writes (meta-llama/Llama-3.1-8B-Instruct's
`chat_template`, tests/data/chat_templates/meta-llama-Llama-3.1-8B-Instruct.jinja, byte-checked in
tests/test_llama_template_parity.py), with its chat_template_kwargs `tools_in_user_message` (default true),
`date_string`, `builtin_tools` and `custom_tools` (kwargs of the wrong type are a TemplateError):

- a system turn: `Environment: ipython` when tools or builtin tools are declared, `Tools: …` naming the builtin tools
  (but code_interpreter), the knowledge cutoff and date, the tools as JSON when they are not in the user message,
  then the first message's text when that message is a system one;
- with tools in the user message, the message right after that system message (whatever its role: Meta's template
  takes `messages[0]` of the rest) becomes a user turn holding the tool instructions, the tools and its text;
- every text trimmed, a call as `{"name": …, "parameters": …}` (a builtin tool's as `<|python_tag|>name.call(k="v")`,
  and every call turn ended by `<|eom_id|>` when builtin tools are declared), a tool result in an `ipython` turn as a
  JSON string, then the generation prompt.

Where Meta's template raises, so does the encoder (a TemplateError: a 400), but for several calls in one turn, which
it joins with `; ` (the gateway's parser reads them so). Llama 4 checkpoints ship their own template; there is no
native Llama 4 encoder.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.prompts.template import TemplateError
from gateway.types import ChatRequest

from .markers import BEGIN_OF_TEXT, END_HEADER, EOM, EOT, PYTHON_TAG, START_HEADER

USER_TOOLS_INSTRUCTION = (
    "Given the following functions, please respond with a JSON for a function call with its proper arguments that "
    'best answers the given prompt.\n\nRespond in the format {"name": function name, "parameters": dictionary of '
    "argument name and its value}.Do not use variables.\n\n"
)
SYSTEM_TOOLS_INSTRUCTION = (
    "You have access to the following functions. To call a function, please respond with JSON for a function call."
    'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.'
    "Do not use variables.\n\n"
)
DEFAULT_DATE = "26 Jul 2024"


def turn(role: str, body: str, end: str = EOT) -> str:
    return f"{START_HEADER}{role}{END_HEADER}\n\n{body}{end}"


def text(message: dict[str, Any]) -> str:
    return (message.get("content") or "").strip()


def tools_json(tools: list[Any]) -> str:
    return "".join(json.dumps(t, indent=4, ensure_ascii=False) + "\n\n" for t in tools)


def builtin_tool_names(kwargs: dict[str, Any]) -> list[str] | None:
    """The `builtin_tools` chat_template_kwarg (names such as brave_search, wolfram_alpha), None when not given."""
    names = kwargs.get("builtin_tools")
    if "builtin_tools" not in kwargs:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TemplateError("chat_template_kwargs.builtin_tools must be a list of tool names")
    return names


def call_text(call: dict[str, Any], builtin: list[str] | None) -> str:
    """A past call as Meta's template writes it: JSON, or a builtin tool's `<|python_tag|>name.call(k="v")`."""
    fn = call["function"]
    arguments = fn.get("arguments")
    if builtin is not None and fn["name"] in builtin:
        if not isinstance(arguments, dict) or not all(isinstance(v, str) for v in arguments.values()):
            raise TemplateError(f"a call of the builtin tool {fn['name']!r} takes string arguments only")
        listed = ", ".join(f'{name}="{value}"' for name, value in arguments.items())
        return f"{PYTHON_TAG}{fn['name']}.call({listed})"
    return f'{{"name": "{fn["name"]}", "parameters": {json.dumps(arguments, ensure_ascii=False)}}}'


def prompt_tools(request: ChatRequest) -> list[Any] | None:
    """The tools the prompt declares: the `custom_tools` chat_template_kwarg where given (Meta's template lets it
    replace `tools`), else the request's unless tool_choice is "none"; None for no tools."""
    if "custom_tools" not in request.template_kwargs:
        return (request.tools if request.tool_choice != "none" else None) or None
    custom = request.template_kwargs["custom_tools"]
    if not isinstance(custom, list):
        raise TemplateError("chat_template_kwargs.custom_tools must be a list of tools")
    return custom


def system_turn(system: str, tools: list[Any] | None, kwargs: dict[str, Any]) -> str:
    builtin = builtin_tool_names(kwargs)
    date = kwargs.get("date_string", DEFAULT_DATE)
    if not isinstance(date, str):
        raise TemplateError("chat_template_kwargs.date_string must be a string")
    body = "Environment: ipython\n" if builtin is not None or tools is not None else ""
    if builtin is not None:
        body += "Tools: " + ", ".join(n for n in builtin if n != "code_interpreter") + "\n\n"
    body += f"Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n"
    if tools is not None and not kwargs.get("tools_in_user_message", True):
        body += SYSTEM_TOOLS_INSTRUCTION + tools_json(tools)
    return turn("system", body + system)


def continued(prompt: str, request: ChatRequest) -> str:
    """`prompt` cut right after the final message's text (inside a tool result's JSON string), so the model goes on."""
    final = request.messages[-1] if request.messages else {}
    if request.add_generation_prompt:
        raise TemplateError("continue_final_message and add_generation_prompt cannot both be set")
    if not isinstance(final.get("content"), str) or final.get("tool_calls") is not None:
        raise TemplateError("continue_final_message needs a final message with text content")
    if final["role"] in ("tool", "ipython"):
        return prompt[: -len(EOT) - 1]  # the JSON string left open, the text's trailing whitespace in it
    return prompt[: -len(EOT)].rstrip()  # as the gateway cuts a trimmed text: an empty one cuts its header's "\n\n"


def render_native(request: ChatRequest) -> str:
    """The Llama 3.1 prompt of `request` (JSON tool calls), as Meta's chat template writes it."""
    messages, kwargs = list(request.messages), request.template_kwargs
    if not messages:
        raise TemplateError("Llama 3.1's template needs at least one message")
    tools = prompt_tools(request)
    system = text(messages.pop(0)) if messages and messages[0]["role"] == "system" else ""
    out = BEGIN_OF_TEXT + system_turn(system, tools, kwargs)
    if tools is not None and kwargs.get("tools_in_user_message", True):
        if not messages:
            raise TemplateError("Llama 3.1 puts the tools in the first user message: there is none")
        out += turn("user", USER_TOOLS_INSTRUCTION + tools_json(tools) + text(messages.pop(0)))
    builtin = builtin_tool_names(kwargs)
    for msg in messages:
        role, calls = msg["role"], msg.get("tool_calls")
        if calls is not None:
            if not calls:
                raise TemplateError("Llama 3.1 has no assistant turn with an empty tool_calls list")
            body = "; ".join(call_text(call, builtin) for call in calls)
            out += turn("assistant", body, EOM if builtin is not None else EOT)
        elif role in ("tool", "ipython"):
            out += turn("ipython", json.dumps(msg.get("content") or "", ensure_ascii=False))
        else:
            out += turn(role, text(msg))
    if request.continue_final_message:
        return continued(out, request)
    if request.add_generation_prompt:
        out += f"{START_HEADER}assistant{END_HEADER}\n\n"
    return out
