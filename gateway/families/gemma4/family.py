"""The gemma4 family: Gemma 4's calls in object notation and its thought channel."""

from __future__ import annotations

from typing import Any

from backends.base import Grammar
from gateway.families.base import Family, OutputParser
from gateway.families.templates import render_request
from gateway.prompts.template import TemplateError
from gateway.types import ChatRequest

from .arguments import kept_under_strict
from .grammar import build_grammar
from .markers import CHANNEL, CHANNEL_END, STOP_TOKENS
from .parser import Gemma4Parser


class Gemma4Family(Family):
    """`<|tool_call>call:NAME{…}<tool_call|>` calls, `<|channel>thought…<channel|>` reasoning; stop at `<turn|>` or
    `<|tool_response>` (the model waits for the tool's answer).

    Prompts come from the checkpoint's own chat template (or options.chat_template): Gemma 4 ships one, and
    no native encoder is kept here. Its current revision renders in time quadratic in the messages (two forward
    scans per message: ~1.2 s of CPU for 800 messages, bench/gemma4_render_bench.py); the template bounds
    (prompts/template_bounds.py) refuse a render past 10 s of CPU with a 400.
    """

    name = "gemma4"
    keep_in_assistant = frozenset({CHANNEL, CHANNEL_END})
    """Gemma 4's template strips an assistant turn's thought channel (`strip_thinking`, at `<|channel>` …
    `<channel|>`): left tokens, the template sees them and the history is what vLLM renders."""

    def render(self, request: ChatRequest) -> str:
        template = self.context.options.get("chat_template") or self.context.chat_template
        if not template:
            raise TemplateError("gemma4 needs the checkpoint's chat template (or options.chat_template)")
        return render_request(template, request, self.context.special_tokens_map)

    def keeps_strict(self, parameters: Any) -> bool:
        return kept_under_strict(parameters)

    def stop_token_ids(self) -> list[int]:
        return self.stop_ids_of(*STOP_TOKENS)

    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        return build_grammar(request, self.context.tokenizer)

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        return Gemma4Parser()


FAMILIES = (Gemma4Family,)
