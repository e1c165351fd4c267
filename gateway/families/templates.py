"""Rendering a request through a checkpoint's own chat template, as the template-driven families do."""

from __future__ import annotations

from gateway.families.base import FamilyContext
from gateway.prompts.template import render_chat_template, template_variables
from gateway.types import ChatRequest


def tool_template(context: FamilyContext) -> str | None:
    """options["chat_template"], else the checkpoint's template, when it renders tools; None otherwise."""
    own = context.options.get("chat_template") or context.chat_template
    return own if own and "tools" in template_variables(own) else None


def render_template(template: str, request: ChatRequest, context: FamilyContext) -> str:
    """`request` through `template` (tools left out when tool_choice is "none")."""
    return render_chat_template(
        template,
        request.messages,
        tools=request.tools if request.tool_choice != "none" else None,
        add_generation_prompt=request.add_generation_prompt,
        continue_final_message=request.continue_final_message,
        bos_token=context.bos_token,
        eos_token=context.eos_token,
        template_kwargs=dict(request.template_kwargs),
    )
