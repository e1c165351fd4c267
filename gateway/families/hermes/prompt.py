"""Hermes prompts: the checkpoint's chat template when it handles tools, else our tool-aware ChatML (Qwen3 layout)."""

from __future__ import annotations

import re
from importlib.resources import files

from gateway.families.base import FamilyContext
from gateway.prompts.template import render_chat_template
from gateway.types import ChatRequest

BUILTIN_TEMPLATE = files(__package__).joinpath("chat_template.jinja").read_text(encoding="utf-8")
"""The gateway's tool-aware ChatML template (Qwen3 layout), for checkpoints whose own template has no tools."""

_LEADING_SYSTEM_TURN = re.compile(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", re.DOTALL)
_PROBE = "\x00probe\x00"


def default_system_message(template: str, context: FamilyContext) -> str | None:
    """The system text the checkpoint's own template adds when a conversation has none (SmolLM2 does), when we
    render with ours instead."""
    own = context.chat_template
    if template != BUILTIN_TEMPLATE or not own:
        return None
    user = [{"role": "user", "content": _PROBE}]
    probe = render_chat_template(own, user, add_generation_prompt=False, special_tokens=context.special_tokens_map)
    head = _LEADING_SYSTEM_TURN.match(probe)
    return head.group(1) if head and _PROBE not in head.group(1) else None


def render_prompt(request: ChatRequest, template: str, context: FamilyContext, system_message: str | None) -> str:
    """The prompt text of `request` through `template`."""
    kwargs = dict(request.template_kwargs)
    if system_message is not None:
        kwargs.setdefault("default_system_message", system_message)
    return render_chat_template(
        template,
        request.messages,
        tools=request.tools if request.tool_choice != "none" else None,
        documents=kwargs.pop("documents", None),
        add_generation_prompt=request.add_generation_prompt,
        continue_final_message=request.continue_final_message,
        special_tokens=context.special_tokens_map,
        template_kwargs=kwargs,
    )
