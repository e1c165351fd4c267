"""Kimi K3 argument and response values: no control token inside JSON strings, raw string constraints, costs.

The vocabulary is the synthetic Kimi one of tests/test_kimi_grammar.py. Its xgrammar TokenizerInfo gives the
control tokens their spelling as text, which is what SGLang and vLLM build (`TokenizerInfo.from_huggingface`):
xgrammar treats only empty-string tokens as special.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest
import xgrammar as xg

from backends.base import Grammar
from backends.checkpoint import load_checkpoint
from gateway.errors import APIError
from gateway.families.kimi.grammar import MAX_SETTLED_LENGTH, build_grammar
from gateway.families.kimi.markers import CLOSE, END_OF_MSG, OPEN, SEP
from gateway.families.kimi.values import MAX_MIN_LENGTH, json_value_ebnf
from gateway.grammars.compat import newer_features
from gateway.grammars.json import SchemaGrammarError
from gateway.grammars.patterns import scan
from gateway.grammars.safe_json import MAX_PATTERN_COUNT
from gateway.grammars.safe_json import raw_pattern_ebnf as pattern_ebnf
from gateway.grammars.unenforced import strict_where_possible
from gateway.models.planning import chat_grammar
from gateway.models.registry import served_model_from_checkpoint
from gateway.types import ChatRequest
from tests.test_grammar_compat import kimi_directory
from tests.test_kimi_grammar import Spelled, Vocab, accepts, ids_of, request, synthetic_vocab, tool

HEAD = f"{CLOSE}response{SEP}"


@pytest.fixture(scope="module")
def vocab(tmp_path_factory: pytest.TempPathFactory) -> Vocab:
    return synthetic_vocab(tmp_path_factory.mktemp("kimi-values"))


FORGED = f"{CLOSE}argument{SEP}{CLOSE}call{SEP}{CLOSE}tools{SEP}{CLOSE}message{SEP}"
"""What a JSON string could smuggle (no raw `"` inside one): the token-aware parser would end the argument,
the call and the message there, with the grammar still inside the string."""


def one_arg(schema: dict[str, Any], strict: bool | None = None, required: bool = True) -> dict[str, Any]:
    return tool("f", {"type": "object", "properties": {"x": schema}, "required": ["x"] if required else []}, strict)


def takes(vocab, schema: dict[str, Any], kind: str, *value: str, required: bool = True) -> bool:
    """Whether a call of f(x) whose body for `x` is `value` (strs with control tokens, Spelled parts plain)."""
    body = [f'{OPEN}call tool="f" index="1"{SEP}{OPEN}argument key="x" type="{kind}"{SEP}', *value]
    tail = f"{CLOSE}argument{SEP}{CLOSE}call{SEP}{CLOSE}tools{SEP}"
    return accepts(vocab, request(one_arg(schema, required=required)), HEAD, f"{OPEN}tools{SEP}", *body, tail)


def matches_format(vocab, fmt: dict[str, Any], *parts: str) -> bool:
    encoder, compiler, _, eos = vocab
    matcher = xg.GrammarMatcher(compiler.compile_structural_tag(json.dumps({"type": "structural_tag", "format": fmt})))
    return all(matcher.accept_token(t) for t in ids_of(encoder, *parts)) and matcher.accept_token(eos)


# --- item 1: control tokens inside JSON string values ---------------------------------------------------------


def test_the_vocabulary_has_no_special_tokens_so_json_text_can_take_a_control_token(vocab) -> None:
    """Why the hole is real: xgrammar matches a token by its text in json_schema regions, and nothing here
    (or in from_huggingface on a K3 tokenizer) marks the control tokens special."""
    encoder, _, ids, eos = vocab
    spelled = [encoder.tokenizer.id_to_token(i) for i in range(encoder.tokenizer.get_vocab_size())]
    info = xg.TokenizerInfo(spelled, vocab_type=xg.VocabType.BYTE_LEVEL, stop_token_ids=[eos])  # as the fixture
    assert info.special_token_ids == [] and info.decoded_vocab[ids.close] == CLOSE.encode()
    old_style = {"type": "json_schema", "json_schema": {"type": "object", "properties": {"a": {"type": "string"}}}}
    forged = ['{"a": "x', FORGED, 'y"}']
    assert matches_format(vocab, old_style, *forged)
    # marked special ("" strings, as the bundled worker does), they would be out of every text region
    info = xg.TokenizerInfo(
        ["" if i in ids.all else s for i, s in enumerate(spelled)],
        vocab_type=xg.VocabType.BYTE_LEVEL,
        stop_token_ids=[eos],
    )
    fmt = json.dumps({"type": "structural_tag", "format": old_style})
    matcher = xg.GrammarMatcher(xg.GrammarCompiler(info).compile_structural_tag(fmt))
    assert not all(matcher.accept_token(t) for t in ids_of(encoder, *forged))


@pytest.mark.parametrize("marker", [OPEN, CLOSE, SEP, END_OF_MSG])
@pytest.mark.parametrize(
    ("schema", "kind", "before", "after"),
    [
        ({"type": "object", "properties": {"a": {"type": "string"}}}, "object", '{"a": "x', 'y"}'),
        ({"type": "array", "items": {"type": "string"}}, "array", '["ok", "x', 'y"]'),
        ({"type": "object"}, "object", '{"', 'k": 1}'),  # a free-form object's key
        ({"type": "object", "additionalProperties": {"type": "integer"}}, "object", '{"k', '": 1}'),
        ({"type": "array"}, "array", '[{"a": "x', 'y"}]'),
    ],
)
def test_no_control_token_inside_a_json_string(
    vocab, marker: str, schema: dict, kind: str, before: str, after: str
) -> None:
    assert takes(vocab, schema, kind, before + "plain" + after)
    assert not takes(vocab, schema, kind, before, marker, after)
    assert not takes(vocab, schema, kind, before, Spelled(marker), after)  # text-level: the spelling goes too


def test_json_strings_keep_everything_else(vocab) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    for text in ["a <| b", "<|>", "x<|clos", "<|sep|", "|sep|>", "<<||>>", 'say \\"hi\\"', "\\u003c|open|>", "你好 😀"]:
        assert takes(vocab, schema, "object", '{"a": "' + text + '"}'), text
    assert not takes(vocab, schema, "object", '{"a": "bad \\q escape"}')
    assert not takes(vocab, schema, "object", '{"a": 1}')


def test_length_bounded_json_strings_take_lt_only_escaped(vocab) -> None:
    schema = {"type": "array", "items": {"type": "string", "maxLength": 4}}
    assert takes(vocab, schema, "array", '["abcd", "\\u003c|o"]')
    assert takes(vocab, schema, "array", '["a\\"b"]')  # xgrammar's own bounded rule has no escapes
    assert not takes(vocab, schema, "array", '["abcde"]')
    assert not takes(vocab, schema, "array", '["<b"]')
    assert not takes(vocab, schema, "array", '["', SEP, '"]')


def test_patterns_and_formats_that_could_write_a_control_token_are_narrowed(vocab) -> None:
    risky = {"type": "object", "properties": {"u": {"type": "string", "pattern": "^\\S+$"}}, "required": ["u"]}
    assert takes(vocab, risky, "object", '{"u": "a', CLOSE, 'b"}') is False
    assert not takes(vocab, risky, "object", '{"u": "has space"}')  # narrowed to `[^\\s<]`: still enforced
    assert takes(vocab, risky, "object", '{"u": "a>b"}')
    literal = {"type": "object", "properties": {"u": {"type": "string", "pattern": "^<\\w+>$"}}, "required": ["u"]}
    assert takes(vocab, literal, "object", '{"u": "has space"}')  # a literal "<" cannot be narrowed: dropped
    email = {"type": "object", "properties": {"m": {"type": "string", "format": "email"}}, "required": ["m"]}
    assert not takes(vocab, email, "object", '{"m": "\\"', OPEN, '\\"@a.b"}')
    assert takes(vocab, email, "object", '{"m": "ana.b+x@example.com"}')
    assert not takes(vocab, email, "object", '{"m": "not an email"}')  # enforced as our pattern, not dropped
    pointer = {"type": "object", "properties": {"j": {"type": "string", "format": "json-pointer"}}, "required": ["j"]}
    assert takes(vocab, pointer, "object", '{"j": "/a/b~1c"}')
    assert not takes(vocab, pointer, "object", '{"j": "a/b"}')
    assert not takes(vocab, pointer, "object", '{"j": "/a', OPEN, '"}')
    safe = {"type": "object", "properties": {"c": {"type": "string", "pattern": "^[a-z]+$"}}, "required": ["c"]}
    assert takes(vocab, safe, "object", '{"c": "abc"}')
    assert not takes(vocab, safe, "object", '{"c": "aBc"}')  # a pattern that cannot write "<" stays enforced
    dated = {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}, "required": ["d"]}
    assert takes(vocab, dated, "object", '{"d": "2024-05-01"}')
    assert not takes(vocab, dated, "object", '{"d": "May 1"}')


def test_a_literal_that_spells_a_control_token_leaves_only_safe_text(vocab) -> None:
    odd = {"type": "object", "properties": {"k": {"enum": ["a<|sep|>b", "c"]}}}
    assert json_value_ebnf(odd, "p", strict=True) is None
    assert takes(vocab, odd, "object", "any text")
    assert not takes(vocab, odd, "object", '{"k": "a', SEP, 'b"}')
    assert not takes(vocab, {"enum": [f"x{CLOSE}", "y"]}, "string", "x", CLOSE)
    assert takes(vocab, {"enum": [f"x{CLOSE}", "y"]}, "string", "y")


def test_response_format_json_has_no_control_token_either(vocab) -> None:
    fmt = {"type": "json_object"}
    assert accepts(vocab, request(response_format=fmt), '{"a": "x"}', HEAD)
    assert not accepts(vocab, request(response_format=fmt), '{"a": "x', CLOSE, 'response"}', HEAD)


def test_unusable_json_schema_is_a_400_only_for_strict_tools(vocab) -> None:
    impossible = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}}}
    with pytest.raises(SchemaGrammarError) as info:
        build_grammar(request(one_arg(impossible, strict=True)), "response", vocab[2])
    assert info.value.param == "tools[0].function.parameters.properties.x"
    assert takes(vocab, impossible, "object", "free text, safely")  # not strict: the value is plain safe text
    unclosed = {"type": "array", "items": {"type": "string", "pattern": "^(a$"}}
    with pytest.raises(SchemaGrammarError) as info:
        build_grammar(request(one_arg(unclosed, strict=True)), "response", vocab[2])
    assert info.value.param == "tools[0].function.parameters.properties.x.items.pattern"
    assert takes(vocab, unclosed, "array", '["anything"]')  # not strict: the pattern is dropped
    lookahead = {"type": "array", "items": {"type": "string", "pattern": "^(?=.*<).*$"}}  # xgrammar ignores (?=…)
    assert not takes(vocab, lookahead, "array", '["', CLOSE, '"]')


# --- item 2: raw string constraints ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "value", "ok"),
    [
        ({"type": "string", "pattern": "^[A-Z]{3}$"}, "ABC", True),
        ({"type": "string", "format": "date"}, "2024-02-29", True),  # a format is its pattern (string_formats.py)
        ({"type": "string", "format": "date"}, "2023-02-29", False),
        ({"type": "string", "format": "email"}, "not an email", False),
        ({"type": "string", "format": "uuid"}, "0c4ff2a3-3b8e-4d5e-9f00-5a1b2c3d4e5f", True),
        ({"type": "string", "format": "uuid"}, "0c4ff2a3", False),
        ({"type": "string", "pattern": "^[A-Z]{3}$"}, "ABCD", False),
        ({"type": "string", "pattern": "^[A-Z]{3}$"}, "abc", False),
        ({"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"}, "2024-05-01", True),
        ({"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"}, "2024-5-1", False),
        ({"type": "string", "pattern": "^[\\w.+-]+@[\\w-]+\\.[\\w.]+$"}, "ana@example.com", True),
        ({"type": "string", "pattern": "^[\\w.+-]+@[\\w-]+\\.[\\w.]+$"}, "ana at example", False),
        ({"type": "string", "pattern": "^\\S+$"}, "has spaces", False),  # narrowed to `[^\\s<]`: enforced
        ({"type": "string", "pattern": "^\\S+$"}, "a<b", False),
        ({"type": "string", "pattern": "^\\S+$"}, "a>b", True),
        ({"type": "string", "pattern": "^<\\w+>$"}, "a b", True),  # a literal "<": not enforced
        ({"type": "string", "pattern": "[a-z]+"}, "A1 b", True),  # unanchored means "contains": not enforced
        ({"type": "string", "pattern": "^a{100000}$"}, "b", True),  # too costly: not enforced
        ({"type": "string", "maxLength": 5}, "abcdef", True),  # not enforced: max_chars costs ~40 ms a mask
        ({"type": "string", "maxLength": 5}, "", False),  # required: non-empty
        ({"type": "string", "minLength": 3}, "ab", False),
        ({"type": "string", "minLength": 3}, "ab<", True),
        ({"type": "string", "minLength": 3}, "abc and more", True),
        ({"type": "string", "minLength": 3}, "a<b", False),  # the documented cost: no "<" before the last counted
        ({"type": "string", "minLength": 3}, "你好😀", True),  # characters, not bytes or tokens
        ({"type": "string", "minLength": 3}, "你好", False),
        ({"type": "string", "minLength": 2, "maxLength": 3}, "a", False),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "abcdef", True),  # impossible: maxLength ignored
        ({"type": "string", "maxLength": 2**40}, "long " * 30, True),  # out of range: ignored
    ],
)
def test_raw_string_constraints(vocab, schema: dict, value: str, ok: bool) -> None:
    assert takes(vocab, schema, "string", value) is ok


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "minLength": 2},
        {"type": "string", "minLength": 3, "maxLength": 9},
        {"type": "string", "pattern": "^[^<]+$"},
    ],
)
@pytest.mark.parametrize("marker", [OPEN, CLOSE, SEP, END_OF_MSG])
def test_constrained_raw_strings_take_no_control_token(vocab, schema: dict, marker: str) -> None:
    assert takes(vocab, schema, "string", "abc")
    assert not takes(vocab, schema, "string", marker, "tail")  # straddling the counted characters
    assert not takes(vocab, schema, "string", "a", marker, "b")
    assert not takes(vocab, schema, "string", "<", marker)
    assert not takes(vocab, schema, "string", "a<", Spelled(marker[1:]))  # straddling into the free part


def test_a_raw_value_counted_before_a_literal_writes_its_classes_negated(vocab) -> None:
    """xgrammar settles `[a-z]{1,64} "@example.com"` at all counts only for a negated class (~5 ms of compile on
    Qwen3's vocabulary, ~145 positive): the value's classes are written negated, the same strings."""
    email = {"type": "string", "pattern": "^[a-z]{1,64}@example\\.com$"}
    grammar = build_grammar(request(one_arg(email)), "response", vocab[2])
    assert grammar is not None and "_negated" in grammar.text
    assert takes(vocab, email, "string", "a" * 64 + "@example.com")
    assert not takes(vocab, email, "string", "a" * 65 + "@example.com")
    assert not takes(vocab, email, "string", "aB@example.com") and not takes(vocab, email, "string", "@example.com")


def test_optional_string_may_be_empty(vocab) -> None:
    assert takes(vocab, {"type": "string", "maxLength": 3}, "string", "", required=False)
    assert not takes(vocab, {"type": "string", "minLength": 3}, "string", "ab", required=False)


def test_unusable_raw_string_schema_is_a_400_only_for_strict_tools(vocab) -> None:
    unclosed = {"type": "string", "pattern": "^(a$"}
    with pytest.raises(SchemaGrammarError) as info:
        build_grammar(request(one_arg(unclosed, strict=True)), "response", vocab[2])
    assert info.value.param == "tools[0].function.parameters.properties.x.pattern"
    assert "parenthesis is not closed" in str(info.value)
    assert takes(vocab, unclosed, "string", "anything")  # not strict: the safe body, no 500
    lookahead = {"type": "string", "pattern": "^(?=.*\\d)[a-z\\d]+$"}  # xgrammar would ignore (?=…): not enforced
    assert build_grammar(request(one_arg(lookahead, strict=True)), "response", vocab[2]) is not None
    assert takes(vocab, lookahead, "string", "No Digits!")
    ipv6 = {"type": "string", "format": "ipv6"}  # enforced in JSON, no raw pattern: refused under strict
    with pytest.raises(SchemaGrammarError) as info:
        build_grammar(request(one_arg(ipv6, strict=True)), "response", vocab[2])
    assert info.value.param == "tools[0].function.parameters.properties.x.format"
    assert takes(vocab, ipv6, "string", "not an address")  # best effort
    backwards = {"type": "string", "minLength": 5, "maxLength": 2}
    with pytest.raises(SchemaGrammarError) as info:
        build_grammar(request(one_arg(backwards, strict=True)), "response", vocab[2])
    assert info.value.param == "tools[0].function.parameters.properties.x"


def test_param_names_the_tool_in_the_request_not_among_active_tools(vocab) -> None:
    unclosed = {"type": "string", "pattern": "^(a$"}
    named = {"type": "function", "function": {"name": "f"}}
    req = request(tool("g", {"type": "object", "properties": {}}), one_arg(unclosed, strict=True), tool_choice=named)
    with pytest.raises(SchemaGrammarError) as info:
        build_grammar(req, "response", vocab[2])
    assert info.value.param == "tools[1].function.parameters.properties.x.pattern"


def test_no_grammar_counts_characters_with_max_chars(vocab) -> None:
    """xgrammar's max_chars makes every free-text token's mask ~40 ms at a 129K vocabulary (bench/RESULTS.md)."""
    props = {"s": {"type": "string", "maxLength": 10}, "o": {"type": "object", "properties": {"q": {"maxLength": 3}}}}
    f = tool("f", {"type": "object", "properties": props, "required": list(props)})
    assert '"max_chars"' not in build_grammar(request(f), "response", vocab[2]).text


def test_hostile_bounds_and_patterns_stay_cheap(vocab) -> None:
    props = {
        "a": {"type": "string", "minLength": 10**9},
        "b": {"type": "string", "pattern": "^(" + "[a-z]{1,256}" * 200 + ")$"},
        "c": {"type": "string", "pattern": "^((((a+)+)+)+)+$"},
        "d": {"type": "string", "maxLength": 2**31 - 1},
    }
    f = tool("f", {"type": "object", "properties": props, "required": ["a"]})
    grammar = build_grammar(request(f), "response", vocab[2])
    vocab[1].compile_structural_tag(grammar.text)
    # what compile time grows with is bounded whatever the schema's numbers (no wall clock here): every repetition
    # count stays under the caps, and the grammar stays small (enforcing the 2,600-character pattern of 200 counted
    # repetitions would make it several times larger)
    counts = [int(n) for pair in re.findall(r"\{\s*(\d+)\s*(?:,\s*(\d*))?", grammar.text) for n in pair if n]
    assert counts and max(counts) <= max(MAX_MIN_LENGTH, MAX_PATTERN_COUNT)
    assert len(grammar.text) < 6_000  # 2,981 today
    assert f"{{{MAX_MIN_LENGTH - 1}, {MAX_MIN_LENGTH - 1}}}" in grammar.text  # the counted `[^<]{63}`, as EBNF


def test_value_grammars_use_nothing_newer_than_the_pinned_xgrammar(vocab) -> None:
    props = {
        "s": {"type": "string", "minLength": 2, "maxLength": 9},
        "p": {"type": "string", "pattern": "^[a-z]+$"},
        "o": {"type": "object", "properties": {"q": {"type": "string", "maxLength": 3}}},
    }
    req = request(tool("f", {"type": "object", "properties": props}), response_format={"type": "json_object"})
    grammar = build_grammar(req, "think", vocab[2])
    assert isinstance(grammar, Grammar)
    assert newer_features(grammar, "0.2.7") == [] and newer_features(grammar, "0.2.8") == []


# --- the pattern scan ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "anchored", "lt"),
    [
        ("^[a-z]+$", True, False),
        ("^\\S+$", True, True),
        ("^[^@\\s]+@[^@\\s]+$", True, True),
        ("^[^<]+$", True, False),
        ("^[^\\S]+$", True, False),
        ("^[!-~]+$", True, True),
        ("^[;-=]$", True, True),
        ("^\\x3c$", True, True),
        ("^\\u003C$", True, True),
        ("^\\u{3c}$", True, True),
        ("^a\\<b$", True, True),
        ("^.{1,5}$", True, True),
        ("^(?<n>x)$", True, False),
        ("^(a|b)$", True, False),
        ("^a|b$", False, False),
        ("[a-z]+", False, False),
        ("^a\\$", False, False),
        ("^[\\d-z]$", True, False),
    ],
)
def test_scan(pattern: str, anchored: bool, lt: bool) -> None:
    facts = scan(pattern)
    assert facts is not None and (facts.anchored, facts.may_match) == (anchored, lt)


@pytest.mark.parametrize("pattern", ["^(?=x)x$", "^\\p{L}$", "^[a-z", "^(a$", "^\\1$", "^\\u12$"])
def test_scan_gives_up_on_what_it_does_not_follow(pattern: str) -> None:
    assert scan(pattern) is None


def test_pattern_ebnf_reports_where_and_why() -> None:
    with pytest.raises(SchemaGrammarError) as info:
        pattern_ebnf("^(a$", "tools[0].function.parameters.properties.x.pattern", strict=True)
    assert info.value.param.endswith(".x.pattern")
    assert str(info.value).startswith("the pattern cannot be enforced: Regex parsing error")
    assert pattern_ebnf("^(a$", "p", strict=False) is None
    assert pattern_ebnf("^<\\S+$", "p", strict=True) is None and pattern_ebnf("^[a-z]+$", "p", strict=True) is not None
    assert "<]" in pattern_ebnf("^\\S+$", "p", strict=True)  # narrowed: no "<"


def test_a_strict_tools_unusable_pattern_reaches_the_client_as_a_400(tmp_path) -> None:
    model = served_model_from_checkpoint("k3", load_checkpoint(kimi_directory(tmp_path)), "kimi_k3", None)
    chat = ChatRequest(
        messages=[{"role": "user", "content": "hi"}], tools=[one_arg({"type": "string", "pattern": "^(a$"}, True)]
    )
    prompt, _ = model.encode_chat(chat)
    with pytest.raises(APIError) as info:
        chat_grammar(model, chat, prompt)
    assert (info.value.status, info.value.param) == (400, "tools[0].function.parameters.properties.x.pattern")


def test_a_raw_strings_small_max_length_is_enforced_and_a_larger_one_refused_under_strict(vocab) -> None:
    """A maxLength up to MAX_SETTLED_LENGTH is a counted class (before, any length passed even under strict); a
    larger one, which costs ~25 ms of compile a character at the value's end, is a 400 naming it under strict."""
    small = {"type": "string", "maxLength": 2}
    assert takes(vocab, small, "string", "ab") and takes(vocab, small, "string", "你")
    assert not takes(vocab, small, "string", "xyz") and not takes(vocab, small, "string", "a<")
    assert not takes(vocab, {**small, "minLength": 2}, "string", "a")
    large = {"type": "string", "maxLength": MAX_SETTLED_LENGTH + 1}
    with pytest.raises(SchemaGrammarError) as info:
        build_grammar(request(one_arg(large, strict=True)), "response", vocab[2])
    assert info.value.param == "tools[0].function.parameters.properties.x.maxLength"
    assert takes(vocab, large, "string", "x" * 10)  # best effort: dropped, as documented


def test_a_tool_omitting_strict_with_a_long_raw_max_length_is_built_best_effort_at_once(tmp_path) -> None:
    """Family.keeps_strict says no for a raw maxLength the strict build refuses: the Responses default (strict where
    possible) builds such a tool best effort with one build, not a refused strict one first."""
    model = served_model_from_checkpoint("k3", load_checkpoint(kimi_directory(tmp_path)), "kimi_k3", None)
    large = {"type": "object", "properties": {"x": {"type": "string", "maxLength": 100}}}
    small = {"type": "object", "properties": {"x": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]}}}
    nested = {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "string", "maxLength": 100}}}}
    assert not model.family.keeps_strict(large)
    assert model.family.keeps_strict(small) and model.family.keeps_strict(nested)  # JSON values keep maxLength
    chat = ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[tool("f", large)], strict_by_default=True)
    prompt, _ = model.encode_chat(chat)
    assert strict_where_possible(chat, model.family.keeps_strict)[1] == set()
    assert chat_grammar(model, chat, prompt) is not None
    strict = replace(chat, tools=[tool("f", large, strict=True)], strict_by_default=False)
    with pytest.raises(APIError) as info:
        chat_grammar(model, strict, prompt)
    assert (info.value.status, info.value.param) == (400, "tools[0].function.parameters.properties.x.maxLength")
