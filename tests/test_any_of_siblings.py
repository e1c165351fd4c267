"""Keywords beside an `anyOf` / `oneOf` hold for each branch: xgrammar 0.2.9 read the union alone (`minimum` beside
it, `properties` and `required` beside `anyOf: [{required: [a]}, {required: [b]}]` dropped). Checked on xgrammar
itself: the grammar takes a candidate value iff `jsonschema` validates it."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest

from gateway.grammars.all_of import SiblingGap, folded_all_of
from gateway.grammars.json import SchemaGrammarError
from gateway.grammars.safe_json import json_value_ebnf
from gateway.grammars.unenforced import check_strict_schemas, strict_able, unenforced_keywords
from gateway.types import ChatRequest
from tests.schema_language import accepts, atoms, exact_verdicts, sample

SPELLINGS = ("<|im_end|>",)
CONTACT = {
    "type": "object",
    "properties": {"email": {"type": "string"}, "phone": {"type": "string"}, "name": {"type": "string"}},
    "required": ["name"],
    "additionalProperties": False,
    "anyOf": [{"required": ["email"]}, {"required": ["phone"]}, {"required": ["fax"]}],
}
BOUNDED = {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}], "minimum": 5}
TYPED = {"type": "string", "anyOf": [{"type": "integer"}, {"enum": ["a", "b", 3]}, {"const": 7}], "maxLength": 1}
ITEMS = {"type": "array", "items": {"type": "integer"}, "maxItems": 2, "anyOf": [
    {"items": {"minimum": 10}}, {"items": {"maximum": 0}}, {"$ref": "#/$defs/Short"}], "$defs": {"Short": {
    "maxItems": 1, "items": {"const": 5}}}}  # fmt: skip
NESTED = {"type": "object", "properties": {"at": {"$ref": "#/$defs/Point"}}, "required": ["at"],
          "additionalProperties": False, "$defs": {"Point": {
              "type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
              "additionalProperties": False, "anyOf": [{"required": ["x"]}, {"required": ["y"]}],
              "minProperties": 1}}}  # fmt: skip
CASES = [
    (CONTACT, ['{"email": "e", "name": "a"}', '{"phone": "p", "name": "a"}', '{"email": "e", "phone": "p", "name": "a"}',
               '{"name": "a"}', '{"email": "e"}', '{"email": 1, "name": "a"}']),
    (BOUNDED, ["5", "7", "4", "-1", '"abc"', '"abcd"', "5.5"]),
    (TYPED, ['"a"', '"b"', "3", "7", '"c"', '"ab"']),
    (ITEMS, ["[]", "[10]", "[10, 11]", "[0, -1]", "[5]", "[5, 5]", "[1]", "[10, 0]", "[10, 11, 12]"]),
    (NESTED, ['{"at": {"x": 1}}', '{"at": {"y": 2}}', '{"at": {"x": 1, "y": 2}}', '{"at": {}}', '{"at": {"x": "1"}}']),
    ({"type": "object", "properties": {"p": BOUNDED, "q": CONTACT}, "additionalProperties": False},
     ['{"p": 6}', '{"p": 4}', '{"q": {"phone": "1", "name": "n"}}', '{"q": {"name": "n"}}', '{"p": 5, "q": {}}']),
]  # fmt: skip


@pytest.mark.parametrize(("schema", "candidates"), CASES)
def test_the_grammar_takes_what_the_schema_validates(schema: dict[str, Any], candidates: list[str]) -> None:
    ebnf, verdicts = exact_verdicts(schema, candidates, SPELLINGS)
    for text, valid in verdicts.items():
        assert accepts(ebnf, text) == valid, text  # fails before: the siblings dropped, invalid values taken


@pytest.mark.parametrize(("schema", "candidates"), CASES)
def test_random_values_near_the_schema_are_taken_iff_valid(schema: dict[str, Any], candidates: list[str]) -> None:
    """Seeded: values drawn from the schema's own names, literals and bounds, objects in declared order."""
    ebnf = json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    validator = jsonschema.Draft202012Validator(schema)
    names, values = [], []
    atoms(schema, names, values)
    rng = random.Random(17)
    texts = {json.dumps(sample(rng, names, values), separators=(", ", ": ")) for _ in range(150)}
    verdicts = {text: validator.is_valid(json.loads(text)) for text in texts | set(candidates)}
    wrong = [text for text, valid in verdicts.items() if accepts(ebnf, text) != valid]
    assert not wrong, wrong


UNFOLDABLE = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^a+$", "anyOf": [
    {"type": "string", "pattern": "^a{2}$"}, {"type": "string"}]}}}  # fmt: skip


def test_a_sibling_that_cannot_be_folded_is_refused_under_strict() -> None:
    """Two patterns are no one pattern: the fold is not exact, so strict refuses the keyword, naming its place."""
    tool = {"type": "function", "function": {"name": "f", "parameters": UNFOLDABLE}}
    assert unenforced_keywords(UNFOLDABLE, "p") == [("p.properties.s", "pattern")]  # fails before: not reported
    assert not strict_able(tool)
    with pytest.raises(SchemaGrammarError) as refused:
        json_value_ebnf(UNFOLDABLE, SPELLINGS, "p", True, exact=True)
    assert refused.value.param == "p.properties.s.pattern"


def test_a_strict_response_format_names_the_keyword_that_does_not_fold() -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "c", "strict": True, "schema": UNFOLDABLE}}
    with pytest.raises(SchemaGrammarError) as refused:  # fails before: accepted, the pattern silently dropped
        check_strict_schemas(ChatRequest(messages=[], response_format=fmt))
    assert refused.value.param == "response_format.json_schema.schema.properties.s.pattern"
    assert "'pattern' beside 'anyOf' cannot be folded" in str(refused.value)
    folding = {**fmt, "json_schema": {**fmt["json_schema"], "schema": CONTACT}}
    check_strict_schemas(ChatRequest(messages=[], response_format=folding))  # folds exactly: no refusal


def test_best_effort_keeps_the_branch_that_does_not_fold_alone() -> None:
    gaps: list[SiblingGap] = []
    folded = folded_all_of(UNFOLDABLE, "p", gaps)
    assert folded["properties"]["s"]["anyOf"] == [{"type": "string", "pattern": "^a{2}$"},
                                                  {"type": "string", "pattern": "^a+$"}]  # fmt: skip
    assert [(g.where, g.keyword) for g in gaps] == [("p.properties.s", "pattern")]
    ebnf = json_value_ebnf(UNFOLDABLE, SPELLINGS, "p", True)
    assert accepts(ebnf, '{"s": "aa"}') and accepts(ebnf, '{"s": "aaa"}') and not accepts(ebnf, '{"s": "b"}')


def test_many_branches_times_many_siblings_are_bounded() -> None:
    """Each level's siblings copied into 50 branches, nested, grow as 50**levels: past the bound the siblings are a
    gap (strict: refused), in bounded time and memory."""
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(3):
        siblings = {f"k{i}": schema for i in range(4)}
        schema = {"type": "object", "properties": siblings, "anyOf": [{"required": [f"k{i}"]} for i in range(50)]}
    gaps: list[SiblingGap] = []
    folded_all_of(schema, "p", gaps)
    assert gaps and all("would copy more than" in g.why for g in gaps)
    with pytest.raises(SchemaGrammarError, match="would copy more than"):
        folded_all_of(schema, "p", exact=True)


def test_a_schema_without_union_siblings_is_unchanged() -> None:
    schema = {"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
              "$defs": {"D": {"oneOf": [{"const": 1}, {"const": 2}]}}}  # fmt: skip
    assert folded_all_of(schema, "p") == schema
    assert unenforced_keywords(schema, "p") == []


def test_listed_values_beside_a_hostile_pattern_are_a_gap_in_bounded_time() -> None:
    """A const / enum folded with a `pattern` is searched with a time budget (ecma_patterns.py): Python's `re`
    backtracks exponentially on `^(a+)+$` (7 s of CPU for 28 `a`s and a `!`), `regex` on `^(a|a)*$`; past the
    budget the values are not checked, a gap naming the pattern beside the union (the branch kept alone)."""
    schema = {"type": "string", "pattern": "^(a|a)*$", "anyOf": [{"enum": ["a" * 60 + "!"]}, {"maxLength": 9}]}
    gaps: list[SiblingGap] = []
    folded_all_of(schema, "p", gaps)
    assert [(g.where, g.keyword) for g in gaps] == [("p", "pattern")]
    assert "pattern searches" in gaps[0].why


PATTERNED = {"type": "string", "pattern": "^a", "anyOf": [{"enum": ["ab", "b", "a\n"]}, {"const": "ba"},
             {"enum": ["y", "ax"]}]}  # fmt: skip


def test_listed_values_beside_a_pattern_keep_those_it_matches() -> None:
    """Fails before: a gap (the values not checked, refused under strict). `"b"`, `"y"` and the const `"ba"` do not
    match: the const's branch admits nothing and is left out."""
    assert folded_all_of(PATTERNED, "p", exact=True) == {"anyOf": [
        {"type": "string", "pattern": "^a", "enum": ["ab", "a\n"]},
        {"type": "string", "pattern": "^a", "enum": ["ax"]}]}  # fmt: skip
    assert unenforced_keywords(PATTERNED, "p") == []
    ebnf = json_value_ebnf(PATTERNED, SPELLINGS, "p", True, exact=True)
    for text, valid in [('"ab"', True), ('"a\\n"', True), ('"ax"', True), ('"b"', False), ('"ba"', False),
                        ('"y"', False), ('"a"', False)]:  # fmt: skip
        assert accepts(ebnf, text) == valid, text


EMPTY_BRANCH = {"anyOf": [{"enum": ["a"], "maxLength": 0}, {"type": "integer"}]}


@pytest.mark.parametrize(
    "schema",
    [
        EMPTY_BRANCH,
        {"type": "object", "properties": {"k": {"oneOf": [{"const": 4, "minimum": 5}, {"type": "string"}]}}},
        {"anyOf": [{"allOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "integer"}]},
        {"anyOf": [{"anyOf": [{"enum": ["a"], "maxLength": 0}, {"const": 1, "type": "string"}]}, {"type": "integer"}]},
    ],
)
def test_a_branch_that_admits_nothing_is_left_out(schema: dict[str, Any]) -> None:
    """Fails before: the values no sibling admits a gap (a 400 under strict; an allOf of disjoint types a 400 even
    best effort). No value matches the branch, so the union takes what the others take."""
    assert unenforced_keywords(schema, "p") == []
    tool = {"type": "function", "function": {"name": "f", "parameters": schema, "strict": True}}
    check_strict_schemas(ChatRequest(messages=[], tools=[tool]))
    ebnf = json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    validator = jsonschema.Draft202012Validator(schema)
    for value in ["a", "", 1, 4, "s", {"k": "s"}, {"k": 4}, {"k": 1}]:
        text = json.dumps(value)
        assert accepts(ebnf, text) == validator.is_valid(value), text


def test_a_union_whose_every_branch_admits_nothing_is_refused_under_strict() -> None:
    """No branch left: the values are a gap as before, naming each branch's `enum`; best effort kept as they were."""
    schema = {"anyOf": [{"enum": ["a"], "maxLength": 0}, {"enum": ["bb"], "maxLength": 1}]}
    assert unenforced_keywords(schema, "p") == [("p.anyOf[0]", "enum"), ("p.anyOf[1]", "enum")]
    with pytest.raises(SchemaGrammarError) as refused:
        json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    assert refused.value.param == "p.anyOf[0].enum"
    ebnf = json_value_ebnf(schema, SPELLINGS, "p", False)
    assert accepts(ebnf, '"a"') and accepts(ebnf, '"bb"')


def test_the_gaps_of_a_branch_left_out_are_not_reported() -> None:
    """A branch that admits nothing says nothing of the values: the keyword its property cannot fold is no gap."""
    unfoldable = {"type": "integer", "multipleOf": 3, "anyOf": [{"type": "integer", "multipleOf": 2}, {"type": "null"}]}
    alive = {"type": "object", "enum": [{"x": 6}], "minProperties": 1, "properties": {"x": unfoldable}}
    assert unenforced_keywords({"anyOf": [alive, {"type": "integer"}]}, "p") == [
        ("p.anyOf[0].properties.x", "multipleOf")]  # fmt: skip
    dead = {**alive, "minProperties": 2}
    assert unenforced_keywords({"anyOf": [dead, {"type": "integer"}]}, "p") == []


def test_nested_unions_of_branches_that_admit_nothing_are_bounded() -> None:
    """Each level's every branch admits nothing: the union is folded again once, as it was (no branch left out),
    not once per level and branch (2**levels)."""
    schema: dict[str, Any] = {"enum": ["a"], "maxLength": 0}
    for _ in range(40):
        schema = {"anyOf": [schema, {"enum": ["b"], "maxLength": 0}]}
    gaps: list[SiblingGap] = []
    folded_all_of(schema, "p", gaps)
    assert len(gaps) == 41


def test_a_discriminator_required_beside_a_oneof_makes_its_branches_exclusive() -> None:
    """`required` beside the oneOf holds for each branch: distinct `kind` consts then exclude each other (strict
    refused this oneOf as one that might match twice)."""
    schema = {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"], "oneOf": [
        {"properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}},
        {"properties": {"kind": {"const": "b"}, "y": {"type": "string"}}}]}  # fmt: skip
    assert unenforced_keywords(schema, "p") == []  # fails before: [("p", "oneOf")]
    ebnf = json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    assert accepts(ebnf, '{"kind": "a", "x": 1}') and accepts(ebnf, '{"kind": "b", "y": "s"}')
    assert not accepts(ebnf, '{"kind": "c"}') and not accepts(ebnf, '{"x": 1}')
    assert unenforced_keywords({**schema, "required": []}, "p") == [("p", "oneOf")]
