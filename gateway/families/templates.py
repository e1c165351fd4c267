"""Chat-template helpers the template-rendered families share."""

from __future__ import annotations

import json
from typing import Any

from gateway.families.base import FamilyContext
from gateway.prompts.template import render_chat_template, template_variables
from gateway.types import ChatRequest


def choose_template(context: FamilyContext, builtin: str) -> str:
    """The template in use: the model's `options.chat_template`, else the checkpoint's if it reads `tools`, else
    `builtin` (empty: the family's native encoder)."""
    override = context.options.get("chat_template")
    if override:
        return override
    own = context.chat_template
    if own and "tools" in template_variables(own):
        return own
    return builtin


def with_argument_objects(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages whose tool calls carry their arguments as objects, as Qwen's templates iterate them."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = {**message, "tool_calls": [_decoded(call) for call in calls]}
        out.append(message)
    return out


def _decoded(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    try:
        arguments = json.loads(fn["arguments"])
    except ValueError:
        return call
    return {**call, "function": {**fn, "arguments": arguments}} if isinstance(arguments, dict) else call


def render_request(template: str, request: ChatRequest, special_tokens: dict[str, str], **variables: Any) -> str:
    """The prompt text of `request` (tools hidden when tool_choice is "none"); `variables` are set for the
    template after the request's own template kwargs."""
    kwargs = {**request.template_kwargs, **variables}
    return render_chat_template(
        template,
        with_argument_objects(request.messages),
        tools=request.tools if request.tool_choice != "none" else None,
        documents=kwargs.pop("documents", None),
        add_generation_prompt=request.add_generation_prompt,
        continue_final_message=request.continue_final_message,
        special_tokens=special_tokens,
        template_kwargs=kwargs,
    )
