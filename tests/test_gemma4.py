"""Gemma 4: object-notation calls, thought channel, grammar. No package ships its vocabulary, so these tests use a
byte-level vocabulary with Gemma 4's control tokens as added tokens (the conformance adapter aligns the recorded ids)."""

from __future__ import annotations

import json
from dataclasses import replace
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
from gateway.grammars.compat import newer_features
from gateway.grammars.json import SchemaGrammarError
from gateway.grammars.unenforced import strict_where_possible
from gateway.models.planning import chat_grammar
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
    # a key of only whitespace (the template's spelling of the key " ") is "", as vLLM's parser reads it
    assert read_call(["call:f{ :", Quoted(" "), ",\t:1}"]) == ("f", {"": 1})
    assert read_call(["call:f{ :", Quoted(" "), "}"]) == ("f", {"": " "})
    # a key with no value is "", as vLLM's parser reads it (malformed before)
    assert read_call(["call:f{a:}"]) == ("f", {"a": ""})
    assert read_call(["call:f{a: ,b:{c:}}"]) == ("f", {"a": "", "b": {"c": ""}})
    # commas that separate nothing add nothing, as vLLM's parser skips them (malformed before)
    assert read_call(["call:f{a:[1,,2],b:[,", Quoted("x"), ", ,],,c:{,},}"]) == (
        "f",
        {"a": [1, 2], "b": ["x"], "c": {}},
    )
    assert read_call(["call:f{,}"]) == ("f", {}) and read_call(["call:f{a:[,]}"]) == ("f", {"a": []})
    for bad in (
        ["call:f"],
        ["call:{}"],
        ["f{}"],
        ["call:f{a}"],
        ["call:f{a:1"],
        ["call:f{a:1} x"],
        ["call:f{a:"],
        ["call:f{a:[1 [2]]}"],
        ["call:f{a:[1,"],
    ):
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


def grammar_accepts(tokenizer: Tokenizer, compiler: xg.GrammarCompiler, request: ChatRequest, *parts: str) -> bool:
    """The request's grammar takes `parts` (control tokens where a part spells one) and then the stop token."""
    grammar = build_grammar(request, tokenizer)
    assert grammar is not None
    matcher = xg.GrammarMatcher(compiler.compile_structural_tag(grammar.text))
    return all(matcher.accept_token(t) for t in ids_of(tokenizer, *parts)) and matcher.accept_token(261)


def ask(**kw: Any) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": "x"}], tools=[WEATHER], **kw)


CALL = (TOOL_CALL, "call:get_weather{city:", QUOTE, "Oslo", QUOTE, "}", TOOL_CALL_END)


def test_grammar(tokenizer: Tokenizer, gemma_compiler: xg.GrammarCompiler) -> None:
    accepts = lambda request, *parts: grammar_accepts(tokenizer, gemma_compiler, request, *parts)
    call = CALL
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


ANSWER = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object", "properties": {
    "n": {"type": "integer"}}, "required": ["n"]}}}  # fmt: skip


def test_tool_response_ends_an_answer_and_is_nowhere_else(tokenizer, gemma_compiler) -> None:
    """`<|tool_response>` is a stop token (the model hands over to the tool): the last token of an answer, never
    text that the parser would show, nor inside a value, where the backend would stop mid-call."""
    accepts = lambda request, *parts: grammar_accepts(tokenizer, gemma_compiler, request, *parts)
    assert accepts(ask(), *CALL, TOOL_RESPONSE) and accepts(ask(tool_choice="required"), *CALL, TOOL_RESPONSE)
    assert not accepts(ask(), "Hi ", TOOL_RESPONSE, " there")
    assert not accepts(ask(), TOOL_CALL, "call:get_weather{city:", QUOTE, "Os", TOOL_RESPONSE, QUOTE, "}",
                       TOOL_CALL_END)  # fmt: skip
    assert not accepts(ask(), CHANNEL, "thought\n", TOOL_RESPONSE, CHANNEL_END, "ok")
    assert not accepts(ask(), "a ", QUOTE, " b")  # no control token is text


def test_auto_with_a_response_format_answers_calls_or_that_json(tokenizer, gemma_compiler) -> None:
    accepts = lambda *parts: grammar_accepts(tokenizer, gemma_compiler, ask(response_format=ANSWER), *parts)
    assert accepts('{"n": 1}') and accepts(*CALL) and accepts(CHANNEL, "thought\nhm", CHANNEL_END, '{"n": 2}')
    assert not accepts() and not accepts("Sure.") and not accepts("Sure. ", *CALL)


def test_bounds_hold_in_gemma_notation(tokenizer, gemma_compiler) -> None:
    """A pattern, number bounds and item counts, as xgrammar enforces them in the other families' JSON."""
    bounded = {"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[a-z]{2}[0-9]{2}$"}, "n": {"type": "integer", "minimum": 1,
        "maximum": 100}, "x": {"type": "number", "exclusiveMinimum": 0, "maximum": 10},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
        "free": {"type": "string", "pattern": "^<.*$"}}}  # fmt: skip
    ok = lambda *parts: takes(tokenizer, gemma_compiler, bounded, *parts)
    tags = lambda *items: ("{tags:[", *[p for i, t in enumerate(items) for p in ([","] if i else []) + [QUOTE, t, QUOTE]],
                           "]}")  # fmt: skip
    assert ok("{code:", QUOTE, "ab12", QUOTE, "}") and not ok("{code:", QUOTE, QUOTE, "}")
    assert not ok("{code:", QUOTE, "ab123", QUOTE, "}") and not ok("{code:", QUOTE, "xab12", QUOTE, "}")
    assert ok("{n:1}") and ok("{n:100}") and not ok("{n:0}") and not ok("{n:101}")
    assert ok("{x:9.5}") and not ok("{x:0}") and not ok("{x:-1}")
    assert ok(*tags("a")) and ok(*tags("a", "b")) and not ok(*tags()) and not ok(*tags("a", "b", "c"))
    assert ok("{free:", QUOTE, "x", QUOTE, "}")  # a pattern that could write `<` is dropped: the string is free
    call = parse(tokenizer, ids_of(tokenizer, TOOL_CALL, "call:f{code:", QUOTE, "ab12", QUOTE, ",n:7}", TOOL_CALL_END))
    assert json.loads(call.tool_calls[0].arguments_raw) == {"code": "ab12", "n": 7}


# --- typed arguments in Gemma's object notation (structural-tag formats, xgrammar 0.2.7 / 0.2.8) ---

TYPED = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "unit": {"enum": ["c", "f"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}, "required": ["deep"]},
    },
    "required": ["city"],
}


@pytest.fixture(scope="module")
def gemma_compiler(tokenizer: Tokenizer) -> xg.GrammarCompiler:
    strings = [tokenizer.id_to_token(i) or "" for i in range(tokenizer.get_vocab_size())]
    return xg.GrammarCompiler(xg.TokenizerInfo(strings, vocab_type=xg.VocabType.BYTE_LEVEL, stop_token_ids=[261]))


def takes(tokenizer, compiler, parameters: dict[str, Any], *parts: str, strict: bool | None = None) -> bool:
    fn: dict[str, Any] = {"name": "f", "parameters": parameters}
    if strict is not None:
        fn["strict"] = strict
    request = ChatRequest(messages=[], tools=[{"type": "function", "function": fn}], tool_choice="required")
    grammar = build_grammar(request, tokenizer)
    assert grammar is not None and newer_features(grammar) == []
    matcher = xg.GrammarMatcher(compiler.compile_structural_tag(grammar.text))
    ids = ids_of(tokenizer, TOOL_CALL, "call:f", *parts, TOOL_CALL_END)
    return all(matcher.accept_token(t) for t in ids) and matcher.accept_token(261)


def test_typed_arguments_follow_the_schema(tokenizer, gemma_compiler) -> None:
    ok = lambda *parts, **kw: takes(tokenizer, gemma_compiler, TYPED, *parts, **kw)
    assert ok("{city:", QUOTE, "Oslo", QUOTE, "}")
    assert ok("{city:", QUOTE, "Oslo", QUOTE, ",days:-3,unit:", QUOTE, "f", QUOTE, ",tags:[", QUOTE, "a", QUOTE, ",",
              QUOTE, "b, c", QUOTE, "],opts:{deep:true}}")  # fmt: skip
    assert not ok("{days:3}")  # required city missing
    assert not ok("{city:", QUOTE, "Oslo", QUOTE, ",days:", QUOTE, "3", QUOTE, "}")  # a string for an integer
    assert not ok("{city:", QUOTE, "Oslo", QUOTE, ",unit:", QUOTE, "k", QUOTE, "}")  # not in the enum
    assert not ok("{city:", QUOTE, "Oslo", QUOTE, ",rm:1}")  # undeclared key
    assert ok("{days:", QUOTE, "x", QUOTE, "}", strict=False)  # strict false: free text


def test_enum_strings_share_one_pair_of_quotes(tokenizer, gemma_compiler) -> None:
    """An enum's strings between one pair of quote tokens, which xgrammar compiles as one trie (10,000 values: 1.8 s
    to 0.1 s): the same values, the others kept apart."""
    schema = {"type": "object", "properties": {"e": {"enum": ["x", "", "y z", 1, None, True]}}, "required": ["e"]}
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    text = build_grammar(ChatRequest(messages=[], tools=tools, tool_choice="required"), tokenizer).text
    assert text.count('\\"x\\" | \\"\\" | \\"y z\\"') == 1  # fails before: each in quotes of its own
    ok = lambda *parts: takes(tokenizer, gemma_compiler, schema, *parts)
    for value in ("x", "", "y z"):
        assert ok("{e:", QUOTE, *([value] if value else []), QUOTE, "}")
    assert ok("{e:1}") and ok("{e:null}") and ok("{e:true}")
    assert not ok("{e:", QUOTE, "y", QUOTE, "}") and not ok("{e:", QUOTE, "1", QUOTE, "}") and not ok("{e:false}")


def test_what_the_typed_grammar_takes_the_parser_reads(tokenizer, gemma_compiler) -> None:
    parts = ("{city:", QUOTE, "Oslo", QUOTE, ",days:-3,tags:[", QUOTE, "a", QUOTE, "],opts:{deep:false}}")
    assert takes(tokenizer, gemma_compiler, TYPED, *parts)
    call = parse(tokenizer, ids_of(tokenizer, TOOL_CALL, "call:f", *parts, TOOL_CALL_END)).tool_calls[0]
    assert json.loads(call.arguments_raw) == {"city": "Oslo", "days": -3, "tags": ["a"], "opts": {"deep": False}}


def test_a_pattern_that_could_write_a_special_token_is_narrowed(tokenizer, gemma_compiler) -> None:
    """`^[^ ]+$` could write `<`: enforced as `^[^< ]+$` (before: dropped, any text passed)."""
    schema = {"type": "object", "properties": {"w": {"type": "string", "pattern": "^[^ ]+$"}}, "required": ["w"]}
    ok = lambda *parts: takes(tokenizer, gemma_compiler, schema, *parts)
    assert ok("{w:", QUOTE, "a>b", QUOTE, "}")
    assert not ok("{w:", QUOTE, "a b", QUOTE, "}") and not ok("{w:", QUOTE, "a<b", QUOTE, "}")


def test_a_string_format_is_enforced_as_its_raw_pattern(tokenizer, gemma_compiler) -> None:
    """A string between quote tokens is raw, as DeepSeek's and Kimi's: its `format` holds as their raw pattern
    (`string_formats.raw_string_pattern`; before: any text, `""` for a date)."""
    schema = {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}, "required": ["d"]}
    ok = lambda *parts: takes(tokenizer, gemma_compiler, schema, *parts)
    assert ok("{d:", QUOTE, "2024-02-29", QUOTE, "}")
    assert not ok("{d:", QUOTE, QUOTE, "}") and not ok("{d:", QUOTE, "2023-02-29", QUOTE, "}")


def test_a_string_closes_only_at_the_quote_token(tokenizer, gemma_compiler) -> None:
    """The quote's spelling is text inside a string; no other control token can enter one."""
    ok = lambda *parts: takes(tokenizer, gemma_compiler, TYPED, *parts)
    assert ok("{city:", QUOTE, 'a <|"|> b', QUOTE, "}")
    assert not ok("{city:", QUOTE, 'a<|"|>}')  # the spelled quote does not close the string
    assert not ok("{city:", QUOTE, "a", TOOL_CALL_END, "b", QUOTE, "}")
    assert not ok("{city:", QUOTE, "a", CHANNEL, "b", QUOTE, "}")


def test_schemas_that_cannot_be_spelled_out_take_any_arguments(tokenizer, gemma_compiler) -> None:
    """A schema the formats cannot spell out took free text inside `{…}`: `call:f{x}` or `call:f{�}`, which the
    parser reads as no call. Now any arguments in Gemma's notation, as a tool that declares no schema; a 400
    under the tool's `strict: true`, as the other families refuse a schema they cannot enforce."""
    recursive = {"type": "object", "properties": {"n": {"$ref": "#"}}}
    assert takes(tokenizer, gemma_compiler, recursive, "{anything:", QUOTE, "x", QUOTE, "}")
    assert takes(tokenizer, gemma_compiler, recursive, "{}")
    assert not takes(tokenizer, gemma_compiler, recursive, "{")
    assert not takes(tokenizer, gemma_compiler, recursive, "{x}")  # fails before
    assert not takes(tokenizer, gemma_compiler, recursive, "{\ufffd}")  # fails before
    spelled = {"type": "object", "properties": {"k": {"enum": [f"a{TOOL_CALL}b"]}}}  # any arguments too
    assert not takes(tokenizer, gemma_compiler, spelled, "{x}") and not takes(tokenizer, gemma_compiler, spelled, "{k:")
    assert takes(tokenizer, gemma_compiler, spelled, "{k:1}")
    for schema in (recursive, spelled):
        with pytest.raises(SchemaGrammarError) as refused:
            takes(tokenizer, gemma_compiler, schema, "{}", strict=True)
        assert refused.value.param == "tools[0].function.parameters"
    optional_only = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": ["string", "null"]}}}
    ok = lambda *parts: takes(tokenizer, gemma_compiler, optional_only, *parts)
    assert ok("{}") and ok("{b:null}") and ok("{a:1.5e-05,b:", QUOTE, "x", QUOTE, "}")
    assert not ok("{,b:null}") and not ok("{a:1,}")


def test_literals_holding_no_whole_special_spelling_keep_the_schema(tokenizer, gemma_compiler) -> None:
    """An enum value, const or key with a `<` (`a<b`, `<|`, `<b>`) is no special token: the tool keeps its schema
    (it fell back to free text, which took `{}` and unparseable text); a const object is spelled out, its strings
    between quote tokens; what the grammar takes the parser reads."""
    schema = {"type": "object", "required": ["kind", "cfg", "<k>"], "properties": {
        "kind": {"enum": ["a<b", "<|", "plain"]}, "cfg": {"const": {"a": [1, "x<y"], "b": None}},
        "<k>": {"type": "boolean"}}}  # fmt: skip
    parts = ("{kind:", QUOTE, "<|", QUOTE, ",cfg:{a:[1,", QUOTE, "x<y", QUOTE, "],b:null},<k>:true}")
    ok = lambda *p: takes(tokenizer, gemma_compiler, schema, *p)
    assert ok(*parts)
    assert not ok("{}") and not ok("{x}")  # fails before: free text
    assert not ok(*parts[:4], ",cfg:{a:[1],b:null},<k>:true}")  # the const is the const
    call = parse(tokenizer, ids_of(tokenizer, TOOL_CALL, "call:f", *parts, TOOL_CALL_END)).tool_calls[0]
    assert json.loads(call.arguments_raw) == {"kind": "<|", "cfg": {"a": [1, "x<y"], "b": None}, "<k>": True}


REFERENCED = {
    "type": "object",
    "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
    "properties": {
        "at": {"$ref": "#/$defs/Point", "description": "sibling keywords stay"},
        "path": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
        "same": {"$ref": "#/properties/at"},
    },
    "required": ["at"],
}


def test_local_references_are_inlined(tokenizer, gemma_compiler) -> None:
    ok = lambda *parts: takes(tokenizer, gemma_compiler, REFERENCED, *parts)
    assert ok("{at:{x:1},path:[{x:2},{x:-3}],same:{x:4}}")
    assert not ok("{at:{x:", QUOTE, "1", QUOTE, "}}")  # the referenced schema's type holds
    assert not ok("{at:{y:1}}") and not ok("{path:[]}")  # its keys, and the required `at`
    dangling = {"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}
    remote = {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}
    for schema in (dangling, remote):  # no format: free text, as a recursive schema
        assert takes(tokenizer, gemma_compiler, schema, "{a:", QUOTE, "x", QUOTE, "}")


def test_free_form_values_take_any_value_three_levels_deep(tokenizer, gemma_compiler) -> None:
    settings = {
        "type": "object",
        "properties": {"settings": {"type": "object"}, "extra": {}, "dry_run": {"type": "boolean"}},
        "required": ["settings"],
    }
    ok = lambda *parts: takes(tokenizer, gemma_compiler, settings, *parts)
    assert ok(
        "{settings:{theme:", QUOTE, "dark", QUOTE, ",size:1.5,tags:[", QUOTE, "a", QUOTE, ",{k:null}]},dry_run:true}"
    )
    assert ok("{settings:{},extra:[1,{a:{}}]}") and ok("{settings:{a:{b:{c:1}}}}")
    assert not ok("{settings:{a:{b:{c:{d:1}}}}}")  # four levels
    assert not ok("{settings:", QUOTE, "x", QUOTE, "}")  # an object, not a string
    assert not ok("{settings:{a<b:1}}")  # no key can spell a control token
    assert not ok("{settings:{a:", QUOTE, "x", TOOL_CALL_END, QUOTE, "}}")  # nor a string hold one
    parsed = parse(
        tokenizer, ids_of(tokenizer, TOOL_CALL, "call:f{settings:{a:[1,", QUOTE, "b", QUOTE, "]}}", TOOL_CALL_END)
    )
    assert json.loads(parsed.tool_calls[0].arguments_raw) == {"settings": {"a": [1, "b"]}}


def test_optional_properties_are_spelled_out_in_linear_size_and_flat_nesting(tokenizer, gemma_compiler) -> None:
    """Each optional member that may come first was an alternative with a copy of the members after it: n optional
    properties spelled out n²/2 members (2,000 of them built a 480 MB grammar; then, counted against MAX_FORMATS,
    300 of them kept free text). Now each tail is one rule: the grammar grows by a few references a member, and its
    structural tag nests no deeper however many members there are."""
    tool = lambda parameters: {"type": "function", "function": {"name": "f", "parameters": parameters}}
    grammar = lambda n: build_grammar(ChatRequest(messages=[{"role": "user", "content": "x"}], tools=[tool(
        {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)}})]), tokenizer).text  # fmt: skip
    small, large = grammar(20), grammar(2000)
    assert '\\"p1999:\\"' in large and (len(large) - len(small)) / 1980 < 150
    assert _nesting(json.loads(large)) == _nesting(json.loads(small))
    many = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(300)}}
    ok = lambda *parts: takes(tokenizer, gemma_compiler, many, *parts)
    assert ok("{}") and ok("{p7:1,p299:-2}") and ok("{p299:0}")
    assert not ok("{p299:0,p7:1}") and not ok("{p7:1,p7:1}") and not ok("{,p1:1}")


def _nesting(value: Any) -> int:
    """How deep JSON arrays and objects nest in `value`."""
    if isinstance(value, dict):
        return 1 + max((_nesting(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_nesting(v) for v in value), default=0)
    return 0


def test_long_strings_copied_by_counted_arrays_are_counted(tokenizer) -> None:
    """Two nested arrays of maxItems 16 copy their item 256 times: a 50 KB enum string made a 13 MB grammar (a body
    of 16 MB, 4 GB); copied text weighs against MAX_FORMATS too."""
    array = lambda item: {"type": "array", "maxItems": 16, "items": item}
    schema = {"type": "object", "properties": {"a": array(array({"enum": ["y" * 50_000]}))}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    text = build_grammar(ChatRequest(messages=[{"role": "user", "content": "x"}], tools=tools), tokenizer).text
    assert text == _any_arguments_grammar(tokenizer)  # too large to spell out: any arguments


def test_excluded_special_ids_copied_by_counted_arrays_are_counted() -> None:
    """Every string's text excludes each special token by id: on a vocabulary with thousands of them (unused ones),
    256 copies of one string item made a 4 MB grammar; the ids weigh against MAX_FORMATS as text does."""
    unused = {263 + i: f"<unused{i}>" for i in range(2000)}
    many_specials = tokenizer_from_ranks({bytes([b]): b for b in range(256)}, SPECIALS | unused, r"\s+|\S+")
    array = lambda item: {"type": "array", "maxItems": 16, "items": item}
    schema = {"type": "object", "properties": {"a": array(array({"type": "string"}))}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    text = build_grammar(ChatRequest(messages=[{"role": "user", "content": "x"}], tools=tools), many_specials).text
    assert text == _any_arguments_grammar(many_specials)  # too large to spell out: any arguments


def _any_arguments_grammar(tokenizer: Tokenizer) -> str:
    """The grammar of one tool `f` that declares no schema (any arguments)."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    return build_grammar(ChatRequest(messages=[{"role": "user", "content": "x"}], tools=tools), tokenizer).text


@pytest.mark.parametrize(
    ("schema", "where"),
    [({"type": "string", "maxLength": 3}, "s.maxLength"), ({"type": "string", "minLength": 1}, "s.minLength"),
     ({"type": "array", "items": {"type": "integer"}, "maxItems": 40}, "s.maxItems"),
     ({"type": "array", "items": {"anyOf": [{"type": "null"}, {"type": "object", "minProperties": 1}]}},
      "s.items.anyOf[1].minProperties"),
     ({"type": "string", "pattern": "^.{0,99}$"}, None), ({"type": "integer", "maxLength": 3}, "")],
)  # fmt: skip
def test_a_strict_tool_whose_keyword_is_not_kept_is_refused(
    tokenizer, schema: dict[str, Any], where: str | None
) -> None:
    """These formats keep no string length, no count past MAX_COUNTED, no object size…: a tool that says `strict:
    true` got a grammar without them (a promise broken); now a 400 naming the keyword, as the other families refuse
    a keyword their grammar cannot keep. Without strict the rest of the schema is enforced, as before. A pattern
    that could write `<` is narrowed under strict whatever its count (`^.{0,99}$`; best effort drops it)."""
    parameters = {"type": "object", "properties": {"s": schema}, "required": ["s"]}

    def grammar(strict: bool) -> str:
        tool = {"type": "function", "function": {"name": "f", "parameters": parameters, "strict": strict}}
        return build_grammar(ChatRequest(messages=[], tools=[tool], tool_choice="required"), tokenizer).text

    assert grammar(False)
    if where == "":  # a string keyword asserts nothing of an integer: nothing is left out
        assert grammar(True)
        return
    if where is None:
        assert "<" in grammar(True) and "99" in grammar(True)
        return
    with pytest.raises(SchemaGrammarError) as refused:
        grammar(True)
    assert refused.value.param == f"tools[0].function.parameters.properties.{where}"


def test_keywords_beside_a_union_hold_for_each_branch(tokenizer, gemma_compiler) -> None:
    """`anyOf` / `oneOf` branches read alone dropped the keywords beside them (`{"required": ["a"]}` took any value,
    `minimum` beside the union nothing): each branch is now folded with them, strict or not."""
    either = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
    }
    bounded = {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "string"}], "minimum": 5, "description": "n"}
    schema = {"type": "object", "properties": {"e": either, "n": bounded}, "required": ["e", "n"],
              "$defs": {"N": {"type": "integer"}}}  # fmt: skip
    ok = lambda *parts: takes(tokenizer, gemma_compiler, schema, *parts, strict=True)
    assert ok("{e:{a:1},n:7}") and ok("{e:{b:", QUOTE, "x", QUOTE, "},n:", QUOTE, "s", QUOTE, "}")
    assert ok("{e:{a:1,b:", QUOTE, "x", QUOTE, "},n:5}")
    assert not ok("{e:{zzz:1},n:7}") and not ok("{e:{},n:7}") and not ok("{e:{a:", QUOTE, "1", QUOTE, "},n:7}")
    assert not ok("{e:{a:1},n:4}")


@pytest.mark.parametrize(
    ("schema", "keyword"),
    [({"type": "string", "pattern": "^a+$", "anyOf": [{"pattern": "^a{2}$"}, {"enum": ["a"]}]}, "pattern"),
     ({"type": "array", "prefixItems": [{"type": "integer"}], "anyOf": [{"prefixItems": [{"minimum": 0}]},
      {"maxItems": 2}]}, "prefixItems")],
)  # fmt: skip
def test_keywords_beside_a_union_that_cannot_be_folded_are_refused_under_strict(
    tokenizer, schema: dict[str, Any], keyword: str
) -> None:
    """Two parts saying `pattern` (two regexes are no one) or `prefixItems`: not folded, so the keyword beside the
    union is not enforced there: a 400 naming it under strict (it was silently dropped); best effort keeps that
    branch alone. (Two `items`, or a branch of a disjoint type, fold exactly: gateway/grammars/all_of.py.)"""
    parameters = {"type": "object", "properties": {"s": schema}, "$defs": {"N": {"type": "integer"}}}

    def grammar(strict: bool) -> str:
        tool = {"type": "function", "function": {"name": "f", "parameters": parameters, "strict": strict}}
        return build_grammar(ChatRequest(messages=[], tools=[tool], tool_choice="required"), tokenizer).text

    assert grammar(False)
    with pytest.raises(SchemaGrammarError) as refused:
        grammar(True)
    assert refused.value.param == f"tools[0].function.parameters.properties.s.{keyword}"


def test_a_tool_omitting_strict_whose_keyword_is_not_kept_is_built_once_best_effort(tokenizer, monkeypatch) -> None:
    """The Responses API makes a tool that omits `strict` strict where it can be: a `maxLength` (which every other
    family's grammar keeps) was promoted, refused by this family's strict build, then rebuilt best effort (two
    builds). Now the family says it cannot keep it first: one build; a schema it keeps is still promoted."""
    model = tokenize_only_model("gemma-4", tokenizer, "gemma4")
    builds: list[int] = []
    family_grammar = model.family.grammar
    monkeypatch.setattr(model.family, "grammar", lambda *a: builds.append(1) or family_grammar(*a))
    bounded = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 3}}}
    nested = {"type": "object", "properties": {"a": {"type": "array", "items": {"$ref": "#/$defs/S"}}},
              "$defs": {"S": {"type": "string", "minLength": 1}}}  # fmt: skip
    plain = {"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "integer", "maxLength": 3}}}
    tools = [
        {"type": "function", "function": {"name": f"f{i}", "parameters": p}} for i, p in enumerate([bounded, nested])
    ]
    chat = ChatRequest(messages=[{"role": "user", "content": "x"}], tools=tools, strict_by_default=True)
    assert chat_grammar(model, chat, "") is not None and len(builds) == 1
    keeps = [{"type": "function", "function": {"name": "g", "parameters": plain}}, *tools]
    assert strict_where_possible(replace(chat, tools=keeps), model.family.keeps_strict)[1] == {0}
