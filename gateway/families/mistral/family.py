"""The mistral families: `[TOOL_CALLS]` calls and `[THINK]` reasoning (tokenizer v3 to v13+), and Magistral 2506's
text `<think>`."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from functools import cache, cached_property
from pathlib import Path

from tokenizers import Tokenizer

from backends.base import Grammar
from backends.sentencepiece_tokenizer import load_sentencepiece
from backends.tekken import load_tekken
from gateway.families.base import Family, OutputParser
from gateway.families.templates import choose_template, render_request
from gateway.types import ChatRequest

from .call_ids import with_template_call_ids
from .grammar import build_grammar
from .markers import EOS, TEKKEN_SPECIALS
from .parser import MistralParser
from .prompt import render_native


def mistral_common_data(name: str) -> Path:
    """A tokenizer file shipped in mistral-common's `data` folder (found without importing the package)."""
    spec = importlib.util.find_spec("mistral_common")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("mistral-common is not installed (pip install --no-deps 'mistral-common==1.13.1')")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / name


@cache
def tekken_tokenizer(name: str = "tekken_240911.json") -> Tokenizer:
    """A tekken file shipped by mistral-common, v7+ special tokens at their ids."""
    return load_tekken(mistral_common_data(name), TEKKEN_SPECIALS)


@cache
def sentencepiece_tokenizer(name: str = "mistral_instruct_tokenizer_240323.model.v3") -> Tokenizer:
    """A SentencePiece model shipped by mistral-common (v3 by default: Mistral 7B v0.3, Mixtral 8x22B)."""
    return load_sentencepiece(mistral_common_data(name))


class MistralFamily(Family):
    """`[TOOL_CALLS]` calls (v3 JSON arrays, v11+ `NAME[ARGS]{…}`), `[THINK]` reasoning; stop at `</s>`.

    The checkpoint's chat template renders prompts when it handles tools, else the native v13 encoder. Call ids
    are 9 alphanumeric characters, and a history's ids are mapped to that shape for the template (`call_ids`).
    """

    name = "mistral"
    text_think = False

    @cached_property
    def template(self) -> str | None:
        return choose_template(self.context, "") or None  # no builtin: the native encoder

    def render(self, request: ChatRequest) -> str:
        if self.template is None:
            return render_native(request)  # writes no call ids
        request = replace(request, messages=with_template_call_ids(request.messages))
        return render_request(self.template, request, self.context.special_tokens_map)

    def stop_token_ids(self) -> list[int]:
        return self.stop_ids_of(EOS)

    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        return build_grammar(request, self.context.tokenizer)

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        return MistralParser(text_think=self.text_think)


class MistralTextThinkFamily(MistralFamily):
    """Magistral Small 2506: reasoning written as text, `<think>…</think>`, at the start of the output."""

    name = "mistral_text_think"
    text_think = True


FAMILIES = (MistralFamily, MistralTextThinkFamily)
