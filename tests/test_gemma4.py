"""Gemma 4: object-notation calls, thought channel, grammar. No package ships its vocabulary, so these tests use a
byte-level vocabulary with Gemma 4's control tokens as added tokens (the conformance adapter aligns the recorded ids)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import xgrammar as xg
from tokenizers import Tokenizer

from backends.tiktoken_bpe import tokenizer_from_ranks
from gateway.families.gemma4 import Gemma4Parser
from gateway.families.gemma4.grammar import build_grammar
from gateway.families.gemma4.markers import (
    CHANNEL,
    CHANNEL_END,
    QUOTE,
    TOOL_CALL,
    TOOL_CALL_END,
    TOOL_RESPONSE,
    TURN_END,
)
from gateway.families.gemma4.parser import Malformed, Quoted, read_call
from gateway.prompts.template import TemplateError
from gateway.types import ChatRequest
from tests.family_checks import check_every_split, replay, tokenize_only_model

SPECIALS = {256: TOOL_CALL, 257: TOOL_CALL_END, 258: QUOTE, 259: CHANNEL, 260: CHANNEL_END, 261: TURN_END}
SPECIALS[262] = TOOL_RESPONSE
IDS = {text: i for i, text in SPECIALS.items()}


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return tokenizer_from_ranks({bytes([b]): b for b in range(256)}, SPECIALS, r"\s+|\S+")


def ids_of(tokenizer: Tokenizer, *parts: str) -> list[int]:
    """Control tokens where a part is one of their spellings; everything else ordinary bytes."""
    out: list[int] = []
    for part in parts:
        out += [IDS[part]] if part in IDS else list(part.encode())
    return out


def parse(tokenizer: Tokenizer, ids: list[int]) -> Any:
    return replay(Gemma4Parser(), tokenizer, ids)


OUTPUTS = [
    (CHANNEL, "thought\nCheck ", CHANNEL, " it.\n\n", CHANNEL_END, "Sure: ", TOOL_CALL, "call:get_weather{city:", QUOTE,
     "Zürich ", TOOL_CALL_END, QUOTE, ", days:3,opts:{deep:[1, ", QUOTE, "x", QUOTE, "]},key with space:null}",
     TOOL_CALL_END, " done"),
    (TOOL_CALL, "call:a{}", TOOL_CALL_END, TOOL_CALL, "call:b{x:", QUOTE, "cut"),
    (TOOL_CALL, "call:bad no brace", TOOL_CALL_END, "text"),
]  # fmt: skip


@pytest.mark.parametrize("parts", OUTPUTS)
def test_streaming_equals_one_shot_for_every_split(tokenizer: Tokenizer, parts: tuple[str, ...]) -> None:
    check_every_split(Gemma4Parser, tokenizer, ids_of(tokenizer, *parts))


def test_reasoning_calls_and_content(tokenizer: Tokenizer) -> None:
    first = parse(tokenizer, ids_of(tokenizer, *OUTPUTS[0]))
    assert first.reasoning_content == f"Check {CHANNEL} it." and first.content == "Sure:  done"
    assert [(c.name, json.loads(c.arguments_raw)) for c in first.tool_calls] == [
        (
            "get_weather",
            {"city": f"Zürich {TOOL_CALL_END}", "days": 3, "opts": {"deep": [1, "x"]}, "key with space": None},
        )
    ]
    cut = parse(tokenizer, ids_of(tokenizer, *OUTPUTS[1]))
    assert [c.name for c in cut.tool_calls] == ["a"] and cut.content is None
    malformed = parse(tokenizer, ids_of(tokenizer, *OUTPUTS[2]))
    assert not malformed.tool_calls and malformed.content == "text"


def test_read_call() -> None:
    assert read_call(["call:f{a:1e-05,b:true,c:", Quoted("x,y} "), ",d:[]}"]) == (
        "f",
        {"a": 1e-05, "b": True, "c": "x,y} ", "d": []},
    )
    assert read_call([" call:g.h { } "]) == ("g.h", {})
    for bad in (["call:f"], ["call:{}"], ["f{}"], ["call:f{a}"], ["call:f{a:1"], ["call:f{a:1} x"], ["call:f{a:}"]):
        with pytest.raises(Malformed):
            read_call(bad)
    with pytest.raises(Malformed, match="deep"):
        read_call(["call:f{a:" + "[" * 100 + "]" * 100 + "}"])


def test_family_uses_the_checkpoint_template(tokenizer: Tokenizer) -> None:
    model = tokenize_only_model("gemma-4", tokenizer, "gemma4")
    assert model.family.stop_token_ids() == [IDS[TURN_END], IDS[TOOL_RESPONSE]]
    with pytest.raises(TemplateError, match="chat template"):
        model.family.render(ChatRequest(messages=[{"role": "user", "content": "x"}]))
    model.family.context.options["chat_template"] = (
        "{% for m in messages %}<|turn>{{ m.role }}\n{{ m.content }}<turn|>\n{% endfor %}<|turn>model\n"
    )
    text, ids = model.encode_chat(ChatRequest(messages=[{"role": "user", "content": "<turn|>hi"}]))
    assert text == "<|turn>user\n<turn|>hi<turn|>\n<|turn>model" and ids.count(IDS[TURN_END]) == 1


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def test_grammar(tokenizer: Tokenizer) -> None:
    strings = [tokenizer.id_to_token(i) or "" for i in range(tokenizer.get_vocab_size())]
    compiler = xg.GrammarCompiler(xg.TokenizerInfo(strings, vocab_type=xg.VocabType.BYTE_LEVEL, stop_token_ids=[261]))

    def accepts(request: ChatRequest, *parts: str) -> bool:
        grammar = build_grammar(request, tokenizer)
        assert grammar is not None
        matcher = xg.GrammarMatcher(compiler.compile_structural_tag(grammar.text))
        return all(matcher.accept_token(t) for t in ids_of(tokenizer, *parts)) and matcher.accept_token(261)

    ask = lambda **kw: ChatRequest(messages=[{"role": "user", "content": "x"}], tools=[WEATHER], **kw)
    call = (TOOL_CALL, "call:get_weather{city:", QUOTE, "Oslo", QUOTE, "}", TOOL_CALL_END)
    assert build_grammar(ChatRequest(messages=[]), tokenizer) is None
    assert accepts(ask(), CHANNEL, "thought\nhm", CHANNEL_END, "Checking. ", *call, " ok")
    assert accepts(ask(), "No call.")
    assert not accepts(ask(), TOOL_CALL, "call:rm{}", TOOL_CALL_END)
    assert not accepts(ask(tool_choice="required"), "No call.")
    assert accepts(ask(tool_choice="required"), *call, *call)
    assert not accepts(ask(tool_choice="required", parallel_tool_calls=False), *call, *call)
    assert not accepts(ask(tool_choice="required"), "<|tool_call>call:get_weather{}<tool_call|>")  # spelled
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    json_answer = ChatRequest(messages=[], response_format={"type": "json_schema", "json_schema": {"schema": schema}})
    assert accepts(json_answer, '{"n": 1}') and not accepts(json_answer, "one")
