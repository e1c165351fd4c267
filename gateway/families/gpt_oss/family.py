"""The gpt_oss family: Harmony prompts, channels and tool calls."""

from __future__ import annotations

from tokenizers import Tokenizer

from backends.base import Grammar
from backends.quicktok_vocab import O200K_PATTERN, quicktok_tokenizer
from gateway.families.base import Family, OutputParser
from gateway.types import ChatRequest

from .grammar import build_grammar
from .markers import STOP_TOKENS
from .parser import HarmonyParser
from .prompt import render_prompt


def harmony_tokenizer() -> Tokenizer:
    """gpt-oss's tokenizer (o200k_harmony) from quicktok's data files: o200k ranks plus Harmony's special tokens."""
    return quicktok_tokenizer("o200k", "o200k_harmony", O200K_PATTERN)


class GptOssFamily(Family):
    """Harmony messages; `analysis` → reasoning, `commentary`/`final` → content, `to=functions.X` → calls.

    Stops at `<|return|>` (the final answer) or `<|call|>` (a tool call ends the turn).
    """

    name = "gpt_oss"

    def render(self, request: ChatRequest) -> str:
        return render_prompt(request)

    def stop_token_ids(self) -> list[int]:
        return self.stop_ids_of(*STOP_TOKENS)

    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        return build_grammar(request, self.context.tokenizer)

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        return HarmonyParser.after(prompt)


FAMILIES = (GptOssFamily,)
