"""The hermes family: ChatML with `<tool_call>` JSON calls (Qwen2.5 / Qwen3 / Hermes models)."""

from __future__ import annotations

import re
from functools import cached_property
from importlib.resources import files

from backends.base import Grammar
from gateway.families.base import Family, OutputParser
from gateway.prompts.template import render_chat_template, template_variables
from gateway.types import ChatRequest

from .grammar import build_grammar
from .markers import THINK_END, THINK_START, TOOL_CALL_END, TOOL_CALL_START, TURN_END, prompt_opens_reasoning
from .parser import HermesParser

BUILTIN_TEMPLATE = files(__package__).joinpath("chat_template.jinja").read_text(encoding="utf-8")
"""The gateway's tool-aware ChatML template (Qwen3 layout), for checkpoints whose own template has no tools."""

_LEADING_SYSTEM_TURN = re.compile(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", re.DOTALL)
_PROBE = "\x00probe\x00"


class HermesFamily(Family):
    """ChatML prompts, `<think>` reasoning and `<tool_call>{"name", "arguments"}</tool_call>` calls."""

    name = "hermes"
    keep_in_assistant = frozenset({THINK_START, THINK_END, TOOL_CALL_START, TOOL_CALL_END})

    @cached_property
    def template(self) -> str:
        """The template in use: options["chat_template"], else the checkpoint's if it handles tools, else ours."""
        override = self.context.options.get("chat_template")
        if override:
            return override
        own = self.context.chat_template
        if own and "tools" in template_variables(own):
            return own
        return BUILTIN_TEMPLATE

    @cached_property
    def default_system_message(self) -> str | None:
        """The system text the checkpoint's own template adds when a conversation has none (SmolLM2 does)."""
        own = self.context.chat_template
        if self.template != BUILTIN_TEMPLATE or not own:
            return None
        probe = render_chat_template(own, [{"role": "user", "content": _PROBE}], add_generation_prompt=False)
        head = _LEADING_SYSTEM_TURN.match(probe)
        return head.group(1) if head and _PROBE not in head.group(1) else None

    def render(self, request: ChatRequest) -> str:
        kwargs = dict(request.template_kwargs)
        if self.default_system_message is not None:
            kwargs.setdefault("default_system_message", self.default_system_message)
        return render_chat_template(
            self.template,
            request.messages,
            tools=request.tools if request.tool_choice != "none" else None,
            documents=kwargs.pop("documents", None),
            add_generation_prompt=request.add_generation_prompt,
            continue_final_message=request.continue_final_message,
            bos_token=self.context.bos_token,
            eos_token=self.context.eos_token,
            template_kwargs=kwargs,
        )

    def stop_token_ids(self) -> list[int]:
        turn_end = self.context.tokenizer.token_to_id(TURN_END)
        ids = ([turn_end] if turn_end is not None else []) + list(self.context.eos_token_ids)
        return list(dict.fromkeys(ids))

    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        return build_grammar(request, self._opens_reasoning(request, prompt))

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        return HermesParser(tool_calls=bool(request.active_tools), in_reasoning=self._opens_reasoning(request, prompt))

    @staticmethod
    def _opens_reasoning(request: ChatRequest, prompt: str) -> bool:
        """Whether the prompt ends inside `<think>` (e.g. a thinking model's generation prompt)."""
        return request.add_generation_prompt and prompt_opens_reasoning(prompt)
