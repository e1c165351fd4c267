"""The kimi_k2 family on a synthetic Kimi checkpoint with K2's added tokens (the K2 rank file is not available
offline; the conversion is the gateway's own `load_kimi_tokenizer`): the checkpoint's template, the parser over
real ids through the detokenizer for every split, and structural tags compiled by xgrammar (control tokens as
text, as SGLang and vLLM see them) against the seed-001 kinds of rules."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import xgrammar as xg

from backends.detokenizer import Detokenizer
from backends.kimi_tokenizer import load_kimi_tokenizer
from gateway.families import get_family
from gateway.families.base import Family, FamilyContext
from gateway.families.kimi.markers import IM_END
from gateway.families.kimi.markers import K2_SECTIONS as K2
from gateway.grammars.compat import newer_features
from gateway.types import ChatRequest, Delta
from tests.test_kimi_tokenizer import _ranks

SPECIALS = [
    "[BOS]",
    IM_END,
    "<|im_user|>",
    "<|im_assistant|>",
    "<|im_middle|>",
    K2.section_begin,
    K2.section_end,
    K2.call_begin,
    K2.arguments_begin,
    K2.call_end,
    K2.think_start,
    K2.think_end,
]
TEMPLATE = (
    "{% for m in messages %}<|im_user|>user<|im_middle|>{{ m['content'] }}{{ '<|im_end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}<|im_assistant|>assistant<|im_middle|>"
    "{% if thinking %}<think>{% else %}<think></think>{% endif %}{% endif %}"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def k2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Family, Any, int]:
    """The kimi_k2 family on a synthetic K2 checkpoint, the tokenizer, and the end-of-turn id."""
    directory: Path = tmp_path_factory.mktemp("kimi-k2")
    ranks = _ranks(400)
    lines = [f"{base64.b64encode(t).decode()} {r}" for t, r in sorted(ranks.items(), key=lambda kv: kv[1])]
    (directory / "tiktoken.model").write_text("\n".join(lines) + "\n", encoding="utf-8")
    decoder = {str(len(ranks) + i): {"content": text, "special": True} for i, text in enumerate(SPECIALS)}
    (directory / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": decoder}), encoding="utf-8")
    tokenizer = load_kimi_tokenizer(directory)
    end = tokenizer.token_to_id(IM_END)
    return get_family("kimi_k2")(FamilyContext(tokenizer, TEMPLATE, None, None, [end], [])), tokenizer, end


def call(name: str, arguments: str, index: int = 0) -> str:
    return f"{K2.call_begin}functions.{name}:{index}{K2.arguments_begin}{arguments}{K2.call_end}"


def section(*calls: str) -> str:
    return K2.section_begin + "".join(calls) + K2.section_end


def request(**kwargs: Any) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": "hi"}], **kwargs)


def test_prompt_is_the_checkpoints_template_and_thinking_follows_it(k2) -> None:
    family, _, end = k2
    thinking = family.render(request(template_kwargs={"thinking": True}))
    assert thinking == "<|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|><think>"
    assert family.in_reasoning(thinking) and not family.in_reasoning(family.render(request()))
    assert family.stop_token_ids() == [end]


def run(family: Family, tokenizer: Any, ids: Sequence[int], cuts: Sequence[int], prompt: str) -> tuple:
    added = {i: t.content for i, t in tokenizer.get_added_tokens_decoder().items()}
    parser, detokenizer = family.parser(request(), prompt), Detokenizer(tokenizer, added)
    deltas: list[Delta] = []
    for start, end in pairwise([0, *cuts, len(ids)]):
        deltas += parser.feed(detokenizer.feed(ids[start:end]))
    deltas += parser.feed(detokenizer.flush()) + parser.finish()
    calls = [(d.tool_name, d.tool_arguments) for d in deltas if d.tool_index is not None]
    return "".join(d.content for d in deltas), "".join(d.reasoning for d in deltas), calls


def test_parser_on_real_ids_for_every_split(k2) -> None:
    family, tokenizer, _ = k2
    value = f"a {K2.call_end} b"  # the end marker inside the string is a token too
    output = "Plan.</think>Sure." + section(call("get_weather", json.dumps({"city": value}))) + IM_END
    ids = tokenizer.encode(output, add_special_tokens=False).ids
    prompt = "<|im_assistant|>assistant<|im_middle|><think>"
    whole = run(family, tokenizer, ids, [], prompt)
    assert whole == ("Sure.", "Plan.", [("get_weather", json.dumps({"city": value}))])
    for cut in range(1, len(ids)):
        assert run(family, tokenizer, ids, [cut], prompt) == whole, cut


@pytest.fixture(scope="module")
def compiler(k2) -> xg.GrammarCompiler:
    _, tokenizer, end = k2
    strings = [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]
    return xg.GrammarCompiler(xg.TokenizerInfo(strings, vocab_type=xg.VocabType.BYTE_LEVEL, stop_token_ids=[end]))


def accepts(k2, compiler: xg.GrammarCompiler, req: ChatRequest, output: str, prompt: str = "") -> bool:
    family, tokenizer, end = k2
    grammar = family.grammar(req, prompt)
    assert grammar is not None and newer_features(grammar) == []
    matcher = xg.GrammarMatcher(compiler.compile_structural_tag(grammar.text))
    ids = tokenizer.encode(output, add_special_tokens=False).ids + [end]
    return all(matcher.accept_token(i) for i in ids) and matcher.is_terminated()


def test_grammar_takes_declared_calls_and_keeps_control_tokens_out_of_values(k2, compiler) -> None:
    auto = request(tools=[WEATHER])
    assert accepts(k2, compiler, auto, "Sure." + section(call("get_weather", '{"city": "Paris"}', 3)))
    assert accepts(k2, compiler, auto, "No call needed.")
    assert not accepts(k2, compiler, auto, section(call("get_time", "{}")))
    assert not accepts(k2, compiler, auto, section(call("get_weather", '{"city": 1}')))
    assert not accepts(k2, compiler, auto, section(call("get_weather", f'{{"city": "a{K2.call_end}"}}')))
    required = request(tools=[WEATHER], tool_choice="required")
    assert not accepts(k2, compiler, required, "Sure.")
    thinking = "<|im_assistant|>assistant<|im_middle|><think>"
    assert accepts(k2, compiler, auto, "Plan.</think>" + section(call("get_weather", '{"city": "P"}')), thinking)


def test_call_ids_name_the_call_as_k2_writes_them_counting_the_conversations_calls(k2) -> None:
    """SGLang's and vLLM's K2 ids: `functions.NAME:N`, N counting every call of the conversation, so the history a
    client sends back has K2's template write the header the model wrote (a random `call_…` id names no tool)."""
    family, tokenizer, _ = k2
    earlier = {
        "id": "functions.get_weather:0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {}},
    }
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [earlier]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "sunny"},
    ]
    output = section(call("get_weather", '{"city": "Oslo"}', 1), call("get_weather", '{"city": "Rome"}', 2))
    added = {i: t.content for i, t in tokenizer.get_added_tokens_decoder().items()}
    ids = tokenizer.encode(output, add_special_tokens=False).ids
    for messages, first in ((history[:1], 0), (history, 1)):
        parser = family.parser(ChatRequest(messages=messages, tools=[WEATHER]), "")
        deltas = parser.feed(Detokenizer(tokenizer, added).feed(ids)) + parser.finish()
        assert [d.tool_id for d in deltas if d.tool_id] == [f"functions.get_weather:{first + i}" for i in range(2)]
