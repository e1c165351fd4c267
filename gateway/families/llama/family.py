"""The llama families: Llama 3.x JSON tool calls and Llama 4 pythonic tool calls."""

from __future__ import annotations

from functools import cache, cached_property

from tokenizers import Tokenizer

from backends.base import Grammar
from backends.conversion_cache import cached_tokenizer
from backends.quicktok_vocab import LLAMA3_PATTERN, quicktok_data, read_vocab
from backends.tiktoken_bpe import tokenizer_from_ranks
from gateway.families.base import Family, OutputParser
from gateway.families.templates import choose_template, render_request
from gateway.prompts.template import TemplateError
from gateway.types import ChatRequest

from .grammar import build_grammar
from .markers import LLAMA3_STOPS, LLAMA4_STOPS, llama31_specials
from .parser import LLAMA3_JSON, LLAMA4_PYTHONIC, CallSyntax, LlamaParser
from .prompt import render_native


@cache
def llama3_tokenizer() -> Tokenizer:
    """Llama 3.1+'s tokenizer from quicktok's `llama3.vocab` (tiktoken ranks) with its 256 special tokens."""
    vocab, specials = quicktok_data() / "llama3.vocab", llama31_specials()
    convert = lambda: tokenizer_from_ranks(read_vocab(vocab), specials, LLAMA3_PATTERN)
    return cached_tokenizer([vocab], [LLAMA3_PATTERN, repr(sorted(specials.items()))], convert)


class Llama3Family(Family):
    """Llama 3.1 / 3.2 / 3.3: `{"name", "parameters"}` calls, bare or after `<|python_tag|>`; stop at `<|eot_id|>`.

    The checkpoint's chat template renders prompts when it handles tools, else the native Llama 3.1 encoder.
    """

    name = "llama3_json"
    syntax: CallSyntax = LLAMA3_JSON
    stops: tuple[str, ...] = LLAMA3_STOPS

    @cached_property
    def template(self) -> str | None:
        return choose_template(self.context, "") or None  # no builtin: the native encoder

    def render(self, request: ChatRequest) -> str:
        if self.template is None:
            return render_native(request)
        return render_request(self.template, request, self.context.special_tokens_map)

    def stop_token_ids(self) -> list[int]:
        return self.stop_ids_of(*self.stops)

    def grammar(self, request: ChatRequest, prompt: str) -> Grammar | None:
        return build_grammar(request, self.context.tokenizer, json_calls=self.syntax is LLAMA3_JSON)

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        return LlamaParser(
            self.syntax,
            forced_calls=self.syntax is LLAMA3_JSON and request.calls_forced,
            tool_calls=bool(request.active_tools),
        )


class Llama4Family(Llama3Family):
    """Llama 4: pythonic call lists `[f(a=1), g()]`, optionally in `<|python_start|>…<|python_end|>`; stop at `<|eot|>`.

    Prompts come from the checkpoint's own chat template (there is no native Llama 4 encoder).
    """

    name = "llama4_pythonic"
    syntax = LLAMA4_PYTHONIC
    stops = LLAMA4_STOPS

    def render(self, request: ChatRequest) -> str:
        if self.template is None:
            raise TemplateError("llama4_pythonic needs the checkpoint's chat template (or options.chat_template)")
        return super().render(request)

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        """A call list opening the output is read even with no tool to call (as vLLM's llama4_pythonic parser tests
        read it, tests/data/parser_corpus.json's vllm-llama4-* cases; Llama 4 has no mid-text trigger)."""
        return LlamaParser(self.syntax)


FAMILIES = (Llama3Family, Llama4Family)
