"""Calls to one Gemma 4 tool `f` written in Gemma's object notation: whether the family's grammar takes one and what
its parser reads back (tests/test_gemma4_required_names.py, tests/test_gemma4_untyped.py)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import xgrammar as xg
from tokenizers import Tokenizer

from backends.tiktoken_bpe import tokenizer_from_ranks
from gateway.families.gemma4.grammar import build_grammar
from gateway.families.gemma4.markers import QUOTE, TOOL_CALL, TOOL_CALL_END
from gateway.types import ChatRequest
from tests.test_gemma4 import SPECIALS, ids_of, parse

STOP = 261


@cache
def byte_tokenizer() -> Tokenizer:
    """One token a byte, and Gemma 4's special tokens (one for all tests)."""
    return tokenizer_from_ranks({bytes([b]): b for b in range(256)}, SPECIALS, r"\s+|\S+")


@cache
def byte_compiler() -> xg.GrammarCompiler:
    """A compiler for `byte_tokenizer`'s vocabulary, STOP its stop token."""
    tokenizer = byte_tokenizer()
    strings = [tokenizer.id_to_token(i) or "" for i in range(tokenizer.get_vocab_size())]
    return xg.GrammarCompiler(xg.TokenizerInfo(strings, vocab_type=xg.VocabType.BYTE_LEVEL, stop_token_ids=[STOP]))


def one_tool(parameters: dict[str, Any], strict: bool | None = None) -> ChatRequest:
    """One tool `f`, `strict` omitted where None (best effort; `strict: false` takes any arguments)."""
    function = {"name": "f", "parameters": parameters} | ({} if strict is None else {"strict": strict})
    return ChatRequest(messages=[], tools=[{"type": "function", "function": function}], tool_choice="required")


def notation(value: Any) -> list[str]:
    """`value` in Gemma's object notation, as `ids_of` parts (strings between quote tokens, no spaces)."""
    if isinstance(value, str):
        return [QUOTE, value, QUOTE]
    if isinstance(value, (dict, list)):
        pairs = value.items() if isinstance(value, dict) else ((None, v) for v in value)
        parts = ["{" if isinstance(value, dict) else "["]
        for i, (key, item) in enumerate(pairs):
            parts += ([","] if i else []) + ([f"{key}:"] if key is not None else []) + notation(item)
        return [*parts, "}" if isinstance(value, dict) else "]"]
    return [json.dumps(value)]


class Calls:
    """One tool `f` with `parameters` (strict unless told): whether its grammar takes a call, and the arguments the
    parser reads back."""

    def __init__(
        self, tokenizer: Tokenizer, compiler: xg.GrammarCompiler, parameters: dict[str, Any], strict: bool | None = True
    ):
        grammar = build_grammar(one_tool(parameters, strict), tokenizer)
        assert grammar is not None
        self._compiled = compiler.compile_structural_tag(grammar.text)
        self._tokenizer = tokenizer

    def read(self, arguments: dict[str, Any]) -> tuple[bool, Any]:
        ids = ids_of(self._tokenizer, TOOL_CALL, "call:f", *notation(arguments), TOOL_CALL_END)
        matcher = xg.GrammarMatcher(self._compiled)
        taken = all(matcher.accept_token(t) for t in ids) and matcher.accept_token(STOP)
        calls = parse(self._tokenizer, ids).tool_calls
        return taken, json.loads(calls[0].arguments_raw)
