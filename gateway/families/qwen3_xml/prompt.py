"""Prompts: the checkpoint's own Jinja template when it handles tools, else ours (the Qwen3-Coder layout)."""

from __future__ import annotations

from importlib.resources import files

from gateway.families.templates import choose_template, with_argument_objects
from gateway.prompts.template import render_chat_template
from gateway.types import ChatRequest

__all__ = ["BUILTIN_TEMPLATE", "choose_template", "render_prompt"]

BUILTIN_TEMPLATE = files(__package__).joinpath("chat_template.jinja").read_text(encoding="utf-8")


def render_prompt(template: str, request: ChatRequest, bos_token: str | None, eos_token: str | None) -> str:
    """The prompt text of `request` (tools hidden when tool_choice is "none")."""
    kwargs = dict(request.template_kwargs)
    return render_chat_template(
        template,
        with_argument_objects(request.messages),
        tools=request.tools if request.tool_choice != "none" else None,
        documents=kwargs.pop("documents", None),
        add_generation_prompt=request.add_generation_prompt,
        continue_final_message=request.continue_final_message,
        bos_token=bos_token,
        eos_token=eos_token,
        template_kwargs=kwargs,
    )
