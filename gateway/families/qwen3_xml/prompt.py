"""Prompts: the checkpoint's own Jinja template when it handles tools, else ours (the Qwen3-Coder layout)."""

from __future__ import annotations

from importlib.resources import files

BUILTIN_TEMPLATE = files(__package__).joinpath("chat_template.jinja").read_text(encoding="utf-8")
"""Our template; `gateway.families.templates` chooses and renders (`choose_template`, `render_request`)."""
