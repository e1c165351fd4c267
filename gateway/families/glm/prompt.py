"""Prompts: the checkpoint's own Jinja template when it handles tools, else ours in the variant's layout."""

from __future__ import annotations

from importlib.resources import files

from gateway.families.templates import with_argument_objects
from gateway.prompts.template import render_chat_template
from gateway.types import ChatRequest

BUILTIN_TEMPLATE = files(__package__).joinpath("chat_template.jinja").read_text(encoding="utf-8")


def render_prompt(template: str, request: ChatRequest, compact: bool, bos: str | None, eos: str | None) -> str:
    """The prompt text of `request`; `compact` is the GLM-4.7 / 5.x layout (our template reads it)."""
    kwargs = {**request.template_kwargs, "compact": compact}
    return render_chat_template(
        template,
        with_argument_objects(request.messages),
        tools=request.tools if request.tool_choice != "none" else None,
        documents=kwargs.pop("documents", None),
        add_generation_prompt=request.add_generation_prompt,
        continue_final_message=request.continue_final_message,
        bos_token=bos,
        eos_token=eos,
        template_kwargs=kwargs,
    )
