"""Strict schemas and the keywords no grammar enforces: xgrammar 0.2.9 drops `not`, `if`/`then`/`else`, the
dependency keywords, `contains` and `uniqueItems`, and reads `oneOf` as `anyOf` (each shown on xgrammar itself
below). Under strict they are a 400 naming their place; a `oneOf` of provably exclusive branches passes; without
strict the rest of the schema is still enforced."""

from __future__ import annotations

import json

import pytest
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string

from gateway.errors import APIError
from gateway.grammars.json import SchemaGrammarError
from gateway.grammars.unenforced import check_strict_schemas, strict_where_possible, unenforced_keywords
from gateway.models.planning import chat_grammar
from gateway.types import ChatRequest

USER = [{"role": "user", "content": "hi"}]
PAIR = {"a": {"type": "integer"}, "b": {"type": "integer"}}


def obj(**keywords) -> dict:
    return {"type": "object", "properties": dict(PAIR), **keywords}


IGNORED = [  # (schema, a value it refuses that xgrammar 0.2.9's grammar takes, the keyword)
    ({"not": {"type": "string"}}, '"x"', "not"),
    ({"type": "integer", "if": {"minimum": 5}, "then": {"maximum": 3}}, "7", "if"),
    (obj(dependentRequired={"a": ["b"]}), '{"a": 1}', "dependentRequired"),
    (obj(dependentSchemas={"a": {"required": ["b"]}}), '{"a": 1}', "dependentSchemas"),
    (obj(dependencies={"a": ["b"]}), '{"a": 1}', "dependencies"),
    ({"type": "array", "items": {"type": "integer"}, "contains": {"const": 5}}, "[1]", "contains"),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "[1, 1]", "uniqueItems"),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "1", "oneOf"),
]


@pytest.mark.parametrize("schema, refused, keyword", IGNORED, ids=[c[2] for c in IGNORED])
def test_each_keyword_found_is_one_xgrammar_ignores(schema, refused, keyword):
    """The list is what xgrammar does: its grammar takes a value the keyword refuses (were a newer xgrammar to
    enforce one, this fails and the keyword can leave the list)."""
    grammar = xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=True)
    assert _is_grammar_accept_string(grammar, refused)
    assert unenforced_keywords(schema, "p") == [("p", keyword)]


def test_keywords_are_found_at_schema_positions_only():
    schema = {
        "type": "object",
        "properties": {
            "not": {"type": "string"},
            "if": {"type": "object", "properties": {"x": {"not": {}}}},
            "d": {"$ref": "#/$defs/D"},
        },
        "$defs": {"D": {"type": "array", "uniqueItems": False, "contains": {}}},
    }
    assert unenforced_keywords(schema, "p") == [("p.properties.if.properties.x", "not"), ("p.$defs.D", "contains")]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "if": {"minimum": 5}},  # no then, no else: nothing asserted
        obj(dependentRequired={}, uniqueItems=False),
        {"oneOf": [{"type": "integer"}, {"type": "string"}, {"type": ["null", "boolean"]}]},
        {"oneOf": [{"const": "a"}, {"enum": ["b", "c"]}, {"const": 1}]},
        {  # a discriminated union (pydantic's shape): a const property every branch requires
            "type": "object",
            "properties": {"pet": {"oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}], "discriminator": {}}},
            "$defs": {
                "Cat": {"type": "object", "properties": {"kind": {"const": "cat"}}, "required": ["kind"]},
                "Dog": {"type": "object", "properties": {"kind": {"enum": ["dog"]}}, "required": ["kind", "bark"]},
            },
        },
        {  # the parent says object: the branches' discriminator suffices
            "type": "object",
            "oneOf": [
                {"properties": {"k": {"const": 1}}, "required": ["k"]},
                {"properties": {"k": {"const": 2}}, "required": ["k"]},
            ],
        },
    ],
)
def test_what_is_enforced_exactly_is_not_found(schema):
    assert unenforced_keywords(schema, "p") == []


def kind(i: int) -> dict:
    return {"type": "object", "properties": {"kind": {"const": f"k{i}"}}, "required": ["kind"]}


def test_a_long_one_of_is_judged_whole_by_one_discriminator():
    """Past 64 branches no pair is compared (a 2,000-branch oneOf would be 2 million pairs): the branches must
    list distinct values, or distinct values of one property they all require."""
    for branches in ([{"const": i} for i in range(2000)], [kind(i) for i in range(2000)]):
        assert unenforced_keywords({"oneOf": branches}, "p") == []
        assert unenforced_keywords({"oneOf": [*branches, branches[7]]}, "p") == [("p", "oneOf")]
    mixed = [*({"const": i} for i in range(100)), {"type": "string"}]  # exclusive, but not by one discriminator
    assert unenforced_keywords({"oneOf": mixed}, "p") == [("p", "oneOf")]
    assert unenforced_keywords({"oneOf": mixed[-64:]}, "p") == []


@pytest.mark.parametrize(
    "branches, parent_type",
    [
        ([{"type": "integer"}, {"type": "number"}], None),  # every integer is a number
        ([{"const": 1}, {"const": 1.0}], None),  # one JSON value
        ([{"type": "string"}, {"minimum": 2}], None),  # a branch of any type (its minimum not enforced either)
        (  # the discriminator binds objects only: "x" matches both
            [
                {"properties": {"k": {"const": 1}}, "required": ["k"]},
                {"properties": {"k": {"const": 2}}, "required": ["k"]},
            ],
            None,
        ),
        (  # not required by both: {} matches both
            [
                {"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"]},
                {"type": "object", "properties": {"k": {"const": 2}}},
            ],
            "object",
        ),
    ],
)
def test_a_one_of_that_may_match_two_branches_is_found(branches, parent_type):
    schema = {"oneOf": branches, **({"type": parent_type} if parent_type else {})}
    untyped = [(f"p.oneOf[{i}]", "minimum") for i, b in enumerate(branches) if b.keys() == {"minimum"}]
    assert unenforced_keywords(schema, "p") == [("p", "oneOf"), *untyped]


def tool(parameters: dict, strict: bool | None) -> dict:
    strictness = {} if strict is None else {"strict": strict}
    return {"type": "function", "function": {"name": "f", "parameters": parameters, **strictness}}


NEGATED = {"type": "object", "properties": {"a": {"type": "string", "not": {"const": "x"}}}}


def test_a_strict_tool_is_a_400_naming_the_keyword_and_a_loose_one_is_best_effort(tokenize_only):
    chat = ChatRequest(messages=USER, tools=[tool(PAIR | {"type": "object"}, None), tool(NEGATED, True)])
    with pytest.raises(APIError) as error:
        chat_grammar(tokenize_only, chat, "prompt")
    assert error.value.status == 400 and error.value.param == "tools[1].function.parameters.properties.a.not"
    for strict in (None, False):  # the family's own rule for an omitted strict; no refusal of the keyword
        chat = ChatRequest(messages=USER, tools=[tool(NEGATED, strict)], tool_choice="required")
        assert chat_grammar(tokenize_only, chat, "prompt") is not None
    unused = ChatRequest(messages=USER, tools=[tool(NEGATED, True)], tool_choice="none")  # no promise made
    chat_grammar(tokenize_only, unused, "prompt")


def test_a_strict_response_format_is_a_400_naming_the_keyword(tokenize_only):
    schema = {"type": "object", "properties": {"n": {"oneOf": [{"type": "integer"}, {"type": "number"}]}}}
    for strict, refused in ((True, True), (False, False)):
        response_format = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": strict}}
        chat = ChatRequest(messages=USER, response_format=response_format)
        if not refused:
            assert chat_grammar(tokenize_only, chat, "prompt") is not None
            continue
        with pytest.raises(APIError) as error:
            chat_grammar(tokenize_only, chat, "prompt")
        assert error.value.param == "response_format.json_schema.schema.properties.n.oneOf"
        assert "anyOf" in error.value.message


CONTROL_TEXT = {"type": "object", "properties": {"a": {"const": "<|im_end|>"}}, "required": ["a"]}
"""A schema whose values must spell a control token: no safe grammar, a 400 under strict, any object otherwise."""


def test_an_omitted_strict_is_strict_where_the_schema_allows_under_strict_by_default(tokenize_only, monkeypatch):
    """The Responses API's default: strict where the schema can be, else best effort (never a 400 for it)."""
    plain, negated, control = (tool(s, None) for s in (PAIR | {"type": "object"}, NEGATED, CONTROL_TEXT))
    chat = ChatRequest(messages=USER, tools=[plain, negated, control, tool(NEGATED, False)], strict_by_default=True)
    promoted, indexes = strict_where_possible(chat)
    assert indexes == {0, 2} and [t["function"].get("strict") for t in promoted.tools] == [True, None, True, False]
    assert chat.tools[0]["function"].keys() == {"name", "parameters"}  # the request's own tools untouched
    assert chat_grammar(tokenize_only, chat, "prompt") is not None  # the control text falls back, as the keyword does
    with pytest.raises(APIError) as error:  # the same schema, strict by the client's word: refused
        chat_grammar(tokenize_only, ChatRequest(messages=USER, tools=[tool(CONTROL_TEXT, True)]), "prompt")
    assert error.value.param == "tools[0].function.parameters"
    builds = []
    family_grammar = tokenize_only.family.grammar
    monkeypatch.setattr(tokenize_only.family, "grammar", lambda *a: builds.append(1) or family_grammar(*a))
    many = [{**tool(CONTROL_TEXT, None), "function": {"name": f"f{i}", "parameters": CONTROL_TEXT}} for i in range(8)]
    assert chat_grammar(tokenize_only, ChatRequest(messages=USER, tools=many, strict_by_default=True), "p") is not None
    assert len(builds) == 2  # strict, then all best effort: not one more build per refused tool
    # not by default (chat completions, messages): an omitted strict is best effort, nothing promoted
    assert (
        strict_where_possible(ChatRequest(messages=USER, tools=[tool(NEGATED, True)], tool_choice="none"))[1] == set()
    )


STRING_GAPS = [  # (schema, a value it refuses that xgrammar 0.2.9's grammar takes, the keyword refused)
    ({"type": "string", "format": "idn-hostname"}, '"not a host name!"', "format"),
    ({"type": "string", "format": "int32"}, '"x"', "format"),
    ({"type": "string", "format": "date", "pattern": "^1"}, '"2024-01-01"', "pattern"),
    ({"type": "string", "pattern": "^a+$", "maxLength": 2}, '"aaaa"', "maxLength"),
    ({"type": "string", "format": "date", "minLength": 11}, '"2024-01-01"', "minLength"),
    ({"format": "date"}, '"x"', "format"),
    ({"pattern": "^a$", "maxLength": 1}, '"bb"', "pattern"),
    ({"type": "string", "pattern": "^(?=.*\\d)[a-z\\d]+$"}, '"abc"', "pattern"),
    ({"type": "string", "pattern": "^(?!a)[a-z]+$"}, '"abc"', "pattern"),
    ({"type": "string", "pattern": "a^b"}, '"ab"', "pattern"),  # found by probing: strict content '{"a": "ab"}'
    ({"type": "string", "pattern": "^$a"}, '"a"', "pattern"),
    ({"type": "string", "pattern": "(a$)b"}, '"ab"', "pattern"),
    ({"type": "string", "pattern": "x?^a"}, '"xa"', "pattern"),
]


@pytest.mark.parametrize("schema, refused, keyword", STRING_GAPS, ids=[json.dumps(c[0]) for c in STRING_GAPS])
def test_each_string_keyword_found_is_one_xgrammar_drops(schema, refused, keyword):
    grammar = xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=True)
    assert _is_grammar_accept_string(grammar, refused)
    assert unenforced_keywords(schema, "p") == [("p", keyword)]


@pytest.mark.parametrize(
    "schema",
    [
        *({"type": ["string", "null"], "format": f} for f in ("date-time", "email", "uuid", "json-pointer")),
        {"type": "integer", "format": "int32"},  # a string format asserts nothing of an integer
        {"type": "string", "pattern": "^a$"},
        {"type": "string", "pattern": "^[(?=]\\(?=a$"},  # no lookahead: a class and an escaped parenthesis
        *({"type": "string", "pattern": p} for p in ("(^a|b)c$", "^a$|^b$", "(?:^a|^b)+$", "[$^]\\$a", "^(a|b$)")),
        {"type": "string", "minLength": 1, "maxLength": 3},
    ],
)
def test_string_keywords_a_grammar_enforces_pass(schema):
    assert unenforced_keywords(schema, "p") == []


def test_a_length_beside_a_pattern_passes_only_where_the_family_holds_it():
    """A family's grammar that holds a length beside a pattern at a place (Family.raw_lengths_held: DeepSeek's raw
    strings) passes it there; any other place, and any family that holds none, is still refused."""
    pair = {"type": "string", "pattern": "^[a-z]+$", "maxLength": 3}
    schema = {"type": "object", "properties": {"x": pair, "y": {"type": "array", "items": pair}}}
    chat = ChatRequest(messages=USER, tools=[tool(schema, True)])
    with pytest.raises(SchemaGrammarError) as refused:
        check_strict_schemas(chat, lambda parameters: frozenset({".properties.x"}))
    assert refused.value.param == "tools[0].function.parameters.properties.y.items.maxLength"
    with pytest.raises(SchemaGrammarError) as refused:
        check_strict_schemas(chat)
    assert refused.value.param == "tools[0].function.parameters.properties.x.maxLength"
    check_strict_schemas(
        ChatRequest(messages=USER, tools=[tool({"type": "object", "properties": {"x": pair}}, True)]),
        lambda parameters: frozenset({".properties.x"}),
    )


def test_a_strict_unknown_format_is_a_400_naming_it(tokenize_only):
    schema = {"type": "object", "properties": {"h": {"type": "string", "format": "idn-hostname"}}, "required": ["h"]}
    with pytest.raises(APIError) as error:
        chat_grammar(tokenize_only, ChatRequest(messages=USER, tools=[tool(schema, True)]), "prompt")
    assert error.value.param == "tools[0].function.parameters.properties.h.format"
    assert "idn-hostname" in error.value.message and "email" in error.value.message
    assert chat_grammar(tokenize_only, ChatRequest(messages=USER, tools=[tool(schema, False)]), "prompt")


def test_the_tools_of_one_request_share_one_pattern_search_budget():
    """Listed values beside a pattern are searched (ecma_patterns.py) within one budget for all of a request's tools:
    a hostile pattern spends it, and the tools after it are not made strict (their values not checked), so a
    request of 128 such tools costs one budget, not 128. Fails before: no tool made strict (values beside a pattern
    were never checked)."""

    def tool(name: str, pattern: str, values: list[str]) -> dict:
        schema = {"type": "object", "properties": {"k": {"enum": values, "pattern": pattern}}}
        return {"type": "function", "function": {"name": name, "parameters": schema}}

    tools = [tool("a", "^a", ["ab", "b"]), tool("h", "^(a|a)*$", ["a" * 60 + "!"]), tool("b", "^b", ["ab", "b"])]
    _, promoted = strict_where_possible(ChatRequest(messages=USER, tools=tools))
    assert promoted == {0}
    _, alone = strict_where_possible(ChatRequest(messages=USER, tools=[tools[2]]))
    assert alone == {0}
