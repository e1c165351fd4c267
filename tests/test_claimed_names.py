"""A declared name a `patternProperties` pattern also matches (its value must satisfy both schemas), and a declared
name written escaped as a free name (`{"\\u0061": 1}` is `{"a": 1}`): xgrammar 0.2.9 took both; checked on
xgrammar itself against `jsonschema`."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest

from gateway.grammars.json import SchemaGrammarError, compact_json_ebnf
from gateway.grammars.safe_json import json_value_ebnf, xml_value_ebnf
from gateway.grammars.unenforced import strict_able, unenforced_keywords
from tests.schema_language import accepts, exact_verdicts

SPELLINGS = ("<|im_end|>",)
CLAIMED = {"type": "object", "properties": {"b": {"type": "integer"}, "c": {"type": "string"}},
           "patternProperties": {"^b": {"type": "integer", "minimum": 3}, "^[a-c]$": {"type": "integer", "maximum": 7}}}  # fmt: skip
"""`b` an integer from 3 to 7 (its own schema and both patterns'); `c` a string and an integer: no value."""
CLAIMED_REST = {**CLAIMED, "properties": {"b": {"type": "integer"}}, "additionalProperties": {"type": "string"}}
CLAIMED_REQUIRED = {**CLAIMED, "properties": {"b": {"type": "integer"}}, "required": ["b"]}
ESCAPED = {"type": "object", "properties": {"a": {"type": "string"}, "ab": {"type": "boolean"}},
           "additionalProperties": {"type": "integer"}}  # fmt: skip
ESCAPED_ANY = {**ESCAPED, "additionalProperties": True}
DISJOINT = {"type": "object", "properties": {"b": {"type": "string"}}, "patternProperties": {"^b": {"type": "integer"}}}
CASES = [
    (CLAIMED_REST, ['{"b": 1}', '{"b": 5}', '{"b": 9}', '{"b": "s"}', '{"x": "s"}', '{"x": 1}', '{"a": 5}',
                    '{"b": 5, "b": 1}', '{"b": 4, "x": "s"}']),
    (CLAIMED_REQUIRED, ['{"b": 1}', '{"b": 5}', '{"b": 9}', '{}', '{"b": 5, "a": 2}', '{"b": 5, "b": 9}']),
    (ESCAPED, ['{"a": "s"}', '{"\\u0061": 1}', '{"\\u0061": "s"}', '{"a": 1}', '{"z": 1}', '{"z": "s"}',
               '{"a\\u0062": 1}', '{"\\u0061b": true}', '{"a": "s", "zz": 2}', '{"ab": true, "abc": 3}']),
    (ESCAPED_ANY, ['{"a": "s"}', '{"\\u0061": 1}', '{"\\/": 1}', '{"z": [1]}', '{"a": null}', '{"a\\u0062": 1}']),
]  # fmt: skip


@pytest.mark.parametrize(
    ("schema", "taken"),
    [
        (CLAIMED_REST, ['{"b": 1}', '{"b": 9}', '{"b": 5, "b": 1}']),
        (CLAIMED_REQUIRED, ['{"b": 1}', '{"b": 9}']),
        (ESCAPED, ['{"\\u0061": 1}', '{"a\\u0062": 1}']),
        (DISJOINT, ['{"b": "x"}', '{"b": 1}']),
    ],
)
def test_xgrammar_takes_these_invalid_objects(schema: dict[str, Any], taken: list[str]) -> None:
    """The gaps, on xgrammar's own grammar: each text is invalid and taken."""
    ebnf = compact_json_ebnf(schema, "p")
    validator = jsonschema.Draft202012Validator(schema)
    for text in taken:
        assert accepts(ebnf, text) and not validator.is_valid(json.loads(text)), text


@pytest.mark.parametrize(("schema", "candidates"), CASES)
def test_the_grammar_takes_what_the_schema_validates(schema: dict[str, Any], candidates: list[str]) -> None:
    """Free names are written plainly, of `[a-zA-Z_][a-zA-Z0-9_]*`: every candidate here that is valid is one."""
    ebnf, verdicts = exact_verdicts(schema, candidates, SPELLINGS)
    for text, valid in verdicts.items():
        if "\\" in text and valid:
            assert not accepts(ebnf, text), text  # a narrowing: no free name escaped while on a declared one's prefix
        else:
            assert accepts(ebnf, text) == valid, text  # fails before: see the test above
    assert unenforced_keywords(schema, "p") == []


@pytest.mark.parametrize(("schema", "candidates"), CASES)
def test_random_objects_taken_are_valid(schema: dict[str, Any], candidates: list[str]) -> None:
    """Seeded: objects of declared, pattern-matching, free and escaped names; none taken is invalid, some valid
    ones are taken."""
    ebnf = json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    validator = jsonschema.Draft202012Validator(schema)
    names = ["a", "\\u0061", "ab", "a\\u0062", "b", "\\u0062", "c", "x", "zz", "\\/", "bc"]
    values = ["1", "5", "9", '"s"', "true", "null", "[1]"]
    rng = random.Random(18)
    taken = 0
    for _ in range(400):
        members = [f'"{rng.choice(names)}": {rng.choice(values)}' for _ in range(rng.randrange(3))]
        text = "{" + ", ".join(members) + "}"
        if accepts(ebnf, text):
            assert validator.is_valid(json.loads(text)), text
            taken += 1
    assert taken > 0


def test_a_name_no_value_fits_is_refused_under_strict_and_listed_best_effort() -> None:
    for schema in (DISJOINT, {**DISJOINT, "required": ["b"]}):
        with pytest.raises(SchemaGrammarError) as refused:
            json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
        assert refused.value.param == "p.patternProperties"
        assert "no value fits" in str(refused.value)
        assert unenforced_keywords(schema, "p") == [("p", "patternProperties")]
        assert not strict_able({"type": "function", "function": {"name": "f", "parameters": schema}})
        assert json_value_ebnf(schema, SPELLINGS, "p", True) is not None  # best effort: xgrammar's grammar


def test_a_pattern_not_matched_exactly_against_a_declared_name_is_refused_under_strict() -> None:
    """A lookahead `searched` does not follow: it cannot say whether `b`'s value must satisfy the pattern's schema."""
    schema = {**DISJOINT, "patternProperties": {"^(?=b)": {"type": "integer"}}}
    with pytest.raises(SchemaGrammarError) as refused:
        json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    assert refused.value.param == "p.patternProperties"
    assert unenforced_keywords(schema, "p") == [("p", "patternProperties")]


def test_the_xml_style_folds_the_patterns_too() -> None:
    """qwen_xml keeps its pattern keys from declared names already (key_patterns.py); `b` now asserts both."""
    schema = {**CLAIMED, "properties": {"b": {"type": "integer"}}}
    ebnf = xml_value_ebnf(schema, "qwen_xml", SPELLINGS, "p", True, exact=True)
    assert not accepts(ebnf, "<parameter=b>\n1\n</parameter>\n")  # fails before: `b`'s own schema alone
    assert accepts(ebnf, "<parameter=b>\n5\n</parameter>\n")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"b": {"type": "integer"}}, "patternProperties": {"^x": {"type": "string"}}},
        {"type": "object", "patternProperties": {"^b": {"type": "integer"}}, "additionalProperties": True},
        {
            "type": "object",
            "properties": {"x_id": {"type": "string"}},
            "patternProperties": {"^x_": {"type": "string"}},
        },
        {"type": "object", "properties": {"a": {"type": "string"}}},
        {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
    ],
)
def test_other_objects_keep_xgrammars_grammar(schema: dict[str, Any]) -> None:
    """No pattern matching a declared name (or one whose schema is the name's: any value its key writes fits), no
    free name beside a declared one: the grammar is xgrammar's."""
    plain = json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    assert "json_pattern_key" not in plain and "json_free_name" not in plain
