"""A required name that `properties` does not list: xgrammar 0.2.9 never wrote it (`{"a": "x"}` taken where `b` is
required, `{"a": "x", "b": 1}` refused); declared before xgrammar with the schema `additionalProperties` gives it.
Checked on xgrammar itself: the grammar takes a candidate value iff `jsonschema` validates it."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest
import xgrammar

from gateway.grammars.all_of import SiblingGap
from gateway.grammars.json import SchemaGrammarError
from gateway.grammars.required import declared_required
from gateway.grammars.safe_json import json_value_ebnf, xml_value_ebnf
from gateway.grammars.unenforced import check_strict_schemas, strict_able, unenforced_keywords
from gateway.types import ChatRequest
from tests.schema_language import accepts, atoms, sample

SPELLINGS = ("<|im_end|>",)
UNLISTED = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]}
TYPED_REST = {**UNLISTED, "additionalProperties": {"type": "integer", "minimum": 3}}
UNEVALUATED = {**UNLISTED, "unevaluatedProperties": {"type": "integer"}}
ONLY_REQUIRED = {"type": "object", "required": ["c"]}
DEEP = {"type": "array", "items": {"$ref": "#/$defs/P"}, "maxItems": 2, "$defs": {"P": {
    "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x", "y"],
    "additionalProperties": {"enum": [1, "s"]}}}}  # fmt: skip
BRANCHES = {"type": "object", "properties": {"k": {"type": "integer"}},
            "anyOf": [{"required": ["k"]}, {"required": ["z"]}]}  # fmt: skip
PATTERNS = {"type": "object", "patternProperties": {"^b": {"type": "integer"}, "c$": {"type": "number", "minimum": 3}},
            "required": ["bc"], "additionalProperties": {"type": "string"}}  # fmt: skip
"""`bc` matches both patterns: an integer of at least 3."""
PATTERNS_REST = {"type": "object", "patternProperties": {"^b": {"type": "integer"}}, "required": ["z"],
                 "additionalProperties": {"enum": [1, "s"]}}  # fmt: skip
"""`z` matches no pattern: additionalProperties' schema."""
A = {"type": "object", "properties": {"x": {"type": "integer"}}, "additionalProperties": {"enum": [1, "s"]}}
REFERENCED = {"$ref": "#/$defs/A", "required": ["x", "z"], "$defs": {"A": A}}
"""xgrammar 0.2.9 reads a `$ref` alone: A's objects, `x` and `z` optional."""
CHAINED = {"$ref": "#/$defs/R", "required": ["z"], "$defs": {"R": {"$ref": "#/$defs/Q", "required": ["x"]},
           "Q": {"$ref": "#/$defs/A"}, "A": A}}  # fmt: skip
"""A target that is a `$ref` with a `required` beside too, to one that is only a `$ref`: each hop folded."""
CASES = [  # each schema, its names no `properties` lists (the grammar writes them last), candidates
    (
        UNLISTED,
        ["b"],
        ['{"a": "x"}', '{"a": "x", "b": 1}', '{"a": "x", "b": {"q": [null]}}', '{"b": 1}', '{"a": 1, "b": 1}'],
    ),
    (TYPED_REST, ["b"], ['{"a": "x", "b": 3}', '{"a": "x", "b": 2}', '{"a": "x", "b": "s"}', '{"a": "x"}']),
    (UNEVALUATED, ["b"], ['{"a": "x", "b": 2}', '{"a": "x", "b": "s"}', '{"a": "x"}']),
    (ONLY_REQUIRED, ["c"], ['{"c": 1}', '{"c": null}', "{}"]),
    (
        DEEP,
        ["y"],
        ["[]", '[{"x": 1, "y": 1}]', '[{"x": 1, "y": "s"}, {"x": 2, "y": 1}]', '[{"x": 1}]', '[{"x": 1, "y": 2}]'],
    ),
    (BRANCHES, ["z"], ['{"k": 1}', '{"z": 0}', '{"k": 1, "z": [0]}', "{}", '{"k": "1", "z": 0}']),
    (
        PATTERNS,
        ["bc", "z"],
        ['{"bc": 3}', '{"bc": 2}', '{"bc": 3.5}', '{"bc": "3"}', '{"bc": 3, "z": "s"}', '{"bc": 3, "z": 1}', "{}"],
    ),
    (PATTERNS_REST, ["z"], ['{"z": 1}', '{"z": "s"}', '{"z": 1, "b": 2}', '{"z": 2}', '{"b": 1}', "{}"]),
    (
        REFERENCED,
        ["z"],
        ['{"x": 1, "z": "s"}', '{"x": 1, "z": 1}', '{"x": 1}', '{"z": 1}', '{"x": 1, "z": 2}', "{}"],
    ),
    (CHAINED, ["z"], ['{"x": 1, "z": "s"}', '{"x": 1}', '{"z": 1}', '{"x": 1, "z": 2}', "{}"]),
]


@pytest.mark.parametrize(("schema", "unlisted", "candidates"), CASES)
def test_the_grammar_takes_what_the_schema_validates(
    schema: dict[str, Any], unlisted: list[str], candidates: list[str]
) -> None:
    ebnf = json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    validator = jsonschema.Draft202012Validator(schema)
    verdicts = {text: validator.is_valid(json.loads(text)) for text in candidates}
    assert True in verdicts.values() and False in verdicts.values()  # the candidates tell the schemas apart
    for text, valid in verdicts.items():
        assert accepts(ebnf, text) == valid, text  # fails before: the required name never written


@pytest.mark.parametrize(("schema", "unlisted", "candidates"), CASES)
def test_random_values_near_the_schema_are_taken_iff_valid(
    schema: dict[str, Any], unlisted: list[str], candidates: list[str]
) -> None:
    """Seeded: values drawn from the schema's names (the required ones last, where the grammar writes them), its
    literals and bounds."""
    ebnf = json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    validator = jsonschema.Draft202012Validator(schema)
    names: list[str] = []
    values: list[Any] = []
    atoms(schema, names, values)
    names += unlisted
    rng = random.Random(17)
    texts = {json.dumps(sample(rng, names, values), separators=(", ", ": ")) for _ in range(300)}
    verdicts = {text: validator.is_valid(json.loads(text)) for text in texts | set(candidates)}
    assert len({verdicts[t] for t in texts}) == 2  # the draws hold both valid and invalid values
    wrong = [text for text, valid in verdicts.items() if accepts(ebnf, text) != valid]
    assert not wrong, wrong


def test_xgrammar_reads_a_ref_alone() -> None:
    """Why a `required` beside a `$ref` is folded with its target: xgrammar 0.2.9's own grammar drops every keyword
    beside the reference (its `required`, even a `type` that refuses the target's objects)."""
    dropped = {**REFERENCED, "type": "string"}
    own = str(xgrammar.Grammar.from_json_schema(json.dumps(dropped), any_whitespace=False))
    assert accepts(own, "{}") and accepts(own, '{"x": 1}') and not accepts(own, '"s"')
    assert not jsonschema.Draft202012Validator(dropped).is_valid({})
    ebnf = json_value_ebnf(REFERENCED, SPELLINGS, "p", True, exact=True)
    assert not accepts(ebnf, "{}") and accepts(ebnf, '{"x": 1, "z": 1}')  # fails before: `{}` taken


def test_xml_arguments_write_the_required_name() -> None:
    ebnf = xml_value_ebnf(UNLISTED, "qwen_xml", SPELLINGS, "p", True)
    assert accepts(ebnf, "<parameter=a>\nx\n</parameter>\n<parameter=b>\n1\n</parameter>")
    assert not accepts(ebnf, "<parameter=a>\nx\n</parameter>")  # fails before: taken, b never written
    ebnf = xml_value_ebnf(REFERENCED, "qwen_xml", SPELLINGS, "p", True)
    assert accepts(ebnf, "<parameter=x>\n1\n</parameter>\n<parameter=z>\ns\n</parameter>")
    assert not accepts(ebnf, "<parameter=x>\n1\n</parameter>")  # fails before: z never required
    ebnf = xml_value_ebnf(PATTERNS, "qwen_xml", SPELLINGS, "p", True)
    assert accepts(ebnf, "<parameter=bc>\n3\n</parameter>")
    assert not accepts(ebnf, "<parameter=bc>\n2\n</parameter>") and not accepts(ebnf, "")  # fails before: "" taken


NOTHING = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"],
           "additionalProperties": False}  # fmt: skip


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        (NOTHING, ""),
        ({"type": "object", "properties": {"o": NOTHING}}, ".properties.o"),
        ({**UNEVALUATED, "unevaluatedProperties": False}, ""),
        ({"type": "object", "patternProperties": {"^(b)\\1": {}}, "required": ["b"]}, ""),  # a back-reference
        ({"type": "object", "patternProperties": {"^b": {"type": "integer"}, "b$": {"type": "string"}},
          "required": ["b"]}, ""),  # both match: no value is both
        ({"type": "object", "properties": {"o": {"$ref": "#/$defs/N", "required": ["b"]}},
          "$defs": {"N": {"type": "object", "additionalProperties": False}}}, ".properties.o"),
        ({"type": "object", "properties": {"o": {"$ref": "#/$defs/Any", "required": ["b"]}}, "$defs": {"Any": {}}},
         ".properties.o"),  # the target says no type: any value
        ({"type": "object", "properties": {"o": {"$ref": "#/$defs/P", "properties": {"c": {}}, "required": ["b"]}},
          "$defs": {"P": {"type": "object", "patternProperties": {"^a": {}}}}}, ".properties.o"),  # not folded
        ({"type": "object", "properties": {"o": {"$ref": "#", "required": ["b"]}}}, ".properties.o.properties.o"),
    ],
)  # fmt: skip
def test_a_name_that_cannot_be_declared_is_refused_under_strict(schema: dict[str, Any], where: str) -> None:
    with pytest.raises(SchemaGrammarError) as refused:  # fails before: a grammar taking objects without b
        json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    assert refused.value.param == f"p{where}.required" and '"b"' in str(refused.value)
    assert unenforced_keywords(schema, "p") == [(f"p{where}", "required")]
    assert not strict_able({"type": "function", "function": {"name": "f", "parameters": schema}})
    json_value_ebnf(schema, SPELLINGS, "p", True)  # best effort: built as before, the name reported above


def test_a_strict_tool_names_the_required_it_cannot_enforce() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": NOTHING, "strict": True}}
    with pytest.raises(SchemaGrammarError) as refused:
        check_strict_schemas(ChatRequest(messages=[], tools=[tool]))
    assert refused.value.param == "tools[0].function.parameters.required"
    assert "'additionalProperties' false refuses: no object matches" in str(refused.value)


def test_a_union_branch_with_a_name_no_schema_allows_is_left_out_not_refused() -> None:
    """The fold already drops a branch requiring a name `additionalProperties: false` refuses (it admits nothing)."""
    schema = {**NOTHING, "required": ["a"], "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}
    assert unenforced_keywords(schema, "p") == []
    ebnf = json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    assert accepts(ebnf, '{"a": "x"}') and not accepts(ebnf, "{}")


def test_a_schema_with_every_required_name_listed_is_the_same_object() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {}}, "required": ["b"]}},
              "required": ["a"], "$defs": {"D": {"type": "string"}}, "anyOf": [{"type": "object"}]}  # fmt: skip
    gaps: list[SiblingGap] = []
    assert declared_required(schema, "p", gaps=gaps) is schema and not gaps
    assert declared_required({"type": "string", "required": ["x"]}, "p") == {"type": "string", "required": ["x"]}


PATTERN_TARGET = {"type": "object", "patternProperties": {"^a": {}}}
AGREEING = [  # whether the strict build takes each schema, predicted: every required name beside `$ref` listed
    {"$ref": "#/$defs/P", "properties": {"b": {}}, "required": ["b"], "$defs": {"P": PATTERN_TARGET}},  # not exact
    {"type": "object", "properties": {"o": {"$ref": "#/$defs/P", "properties": {"b": {}}, "required": ["b"]}},
     "$defs": {"P": PATTERN_TARGET}},
    {"$ref": "#/$defs/S", "properties": {"b": {"type": "integer"}}, "required": ["b"],
     "$defs": {"S": {"type": "object", "properties": {"b": {"type": "string"}}}}},  # `b` admits nothing
    {"type": "object", "properties": {"o": {"$ref": "#", "properties": {"b": {}}, "required": ["b"]}}},  # recursive
    {"$ref": "#/$defs/I", "properties": {"b": {"type": "integer"}}, "required": ["b"],
     "$defs": {"I": {"type": "object", "properties": {"b": {"type": "integer", "minimum": 1}}}}},  # exact
    {"$ref": "#/$defs/A", "required": ["x"], "$defs": {"A": {**A, "required": ["x"]}}},  # the target requires it
    REFERENCED,
    CHAINED,
    PATTERNS_REST,
    UNLISTED,
]  # fmt: skip


@pytest.mark.parametrize("schema", AGREEING)
def test_the_strict_prediction_agrees_with_the_strict_build(schema: dict[str, Any]) -> None:
    """`strict_where_possible` makes a tool strict only where the strict build then takes it (before: a `required`
    beside a `$ref` whose names `properties` lists was never checked, and the build refused the fold)."""
    try:
        built = json_value_ebnf(schema, SPELLINGS, "p", True, exact=True) is not None
    except SchemaGrammarError:
        built = False
    assert strict_able({"type": "function", "function": {"name": "f", "parameters": schema}}) == built
    assert (unenforced_keywords(schema, "p") == []) == built


def test_some_schemas_agreeing_are_refused_and_some_built() -> None:
    """The set above tells the two apart (the agreement is no accident of one verdict)."""
    verdicts = {strict_able({"type": "function", "function": {"name": "f", "parameters": s}}) for s in AGREEING}
    assert verdicts == {True, False}
