"""Prompts: the checkpoint's own Jinja template when it handles tools, else ours in the variant's layout."""

from __future__ import annotations

from importlib.resources import files

BUILTIN_TEMPLATE = files(__package__).joinpath("chat_template.jinja").read_text(encoding="utf-8")
"""Our template (its `compact` variable picks the GLM-4.7 / 5.x layout); `gateway.families.templates`
chooses and renders it (`choose_template`, `render_request`)."""
