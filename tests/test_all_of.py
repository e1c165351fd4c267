"""`allOf` folded into one schema: xgrammar 0.2.9 made a many-branch allOf any JSON value."""

from __future__ import annotations

import pytest

from gateway.grammars.json import SchemaGrammarError
from gateway.grammars.safe_json import json_value_ebnf, xml_value_ebnf
from tests.schema_language import accepts

SPELLINGS = ("<|im_end|>",)
BASE = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


@pytest.mark.parametrize(
    ("schema", "taken", "refused"),
    [
        ({"allOf": [{"type": "integer", "minimum": 5}, {"maximum": 10}]}, ["5", "10"], ["3", "12", '"x"', "{}"]),
        ({"allOf": [{"enum": [1, 2, 3]}, {"enum": [3, 4]}]}, ["3"], ["1", "4"]),
        ({"allOf": [{"type": "number"}, {"type": "integer"}]}, ["2"], ["2.5"]),
        ({"allOf": [{"enum": [1, 2, 3]}, {"minimum": 2}]}, ["2", "3"], ["1"]),
        (
            {"allOf": [{"type": "object", "additionalProperties": False}, {"properties": {"a": {}}}]},
            ["{}"],
            ['{"a": 1}'],
        ),
        (
            {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                       {"properties": {"a": {"minimum": 3}, "b": {}}}]},
            ['{"a": 3}', "{}"],
            ['{"a": 2}', '{"a": 3, "b": 1}'],
        ),
        ({"type": "array", "allOf": [{"items": {"type": "integer"}}, {"items": {"maximum": 2}}]}, ["[1, 2]"], ["[3]"]),
        (
            {"type": "object", "properties": {"p": {"allOf": [{"$ref": "#/$defs/B"}, {"properties": {"y": {}}}]}},
             "required": ["p"], "$defs": {"B": BASE}},
            ['{"p": {"x": 1}}', '{"p": {"x": 1, "y": 2}}'],
            ['{"p": {"y": 2}}', '{"p": {"x": "1"}}', '{"p": 3}'],
        ),
        (
            {"allOf": [BASE, {"properties": {"x": {"minimum": 2}, "z": {"type": "string"}}, "required": ["z"]}]},
            ['{"x": 2, "z": "a"}'],
            ['{"x": 1, "z": "a"}', '{"x": 2}', '{"z": "a"}'],
        ),
    ],
)  # fmt: skip
def test_branches_fold_into_one_schema(schema, taken, refused):
    ebnf = json_value_ebnf(schema, SPELLINGS, "p", True)
    for text in taken:
        assert accepts(ebnf, text), text
    for text in refused:
        assert not accepts(ebnf, text), text  # fails before: the allOf took any JSON value


@pytest.mark.parametrize(
    "schema",
    [
        {"allOf": [{"type": "string"}, {"type": "integer"}]},
        {"allOf": [{"type": "object", "patternProperties": {"^a": {}}}, {"additionalProperties": False}]},
        {"allOf": [{"type": "string", "pattern": "^a+$"}, {"pattern": "^a{2}$"}]},
    ],
)
def test_an_allof_that_does_not_fold_exactly_is_refused(schema):
    with pytest.raises(SchemaGrammarError) as info:  # fails before: a grammar taking any value
        json_value_ebnf(schema, SPELLINGS, "response_format.json_schema.schema", True)
    assert info.value.param == "response_format.json_schema.schema"


def test_xml_arguments_fold_too():
    schema = {"type": "object", "allOf": [BASE, {"properties": {"y": {"type": "integer"}}, "required": ["y"]}]}
    ebnf = xml_value_ebnf(schema, "qwen_xml", SPELLINGS, "p", True)
    assert accepts(ebnf, "<parameter=x>\n1\n</parameter>\n<parameter=y>\n2\n</parameter>")
    assert not accepts(ebnf, "<parameter=x>\n1\n</parameter>")


NODE = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def test_a_described_reference_of_a_recursive_model_stays_a_reference():
    """pydantic v1 writes a described field as an allOf of its $ref: a tree of them is no recursion to inline."""
    child = {"allOf": [{"$ref": "#/definitions/Node"}], "description": "the child"}
    node = {**NODE, "properties": {**NODE["properties"], "child": child}}
    ebnf = json_value_ebnf({"definitions": {"Node": node}, "$ref": "#/definitions/Node"}, SPELLINGS, "p", True)
    assert accepts(ebnf, '{"name": "a", "child": {"name": "b", "child": {"name": "c"}}}')
    assert not accepts(ebnf, '{"name": "a", "child": {"child": {"name": "c"}}}')  # fails before: RecursionError


def test_a_reference_merged_within_itself_is_refused():
    child = {"allOf": [{"$ref": "#/$defs/Node"}, {"minProperties": 1}]}
    node = {**NODE, "properties": {"child": child}}
    with pytest.raises(SchemaGrammarError, match="within itself"):  # fails before: RecursionError
        json_value_ebnf({"$defs": {"Node": node}, "$ref": "#/$defs/Node"}, SPELLINGS, "p", True)


def test_merged_references_that_double_at_each_level_are_refused():
    defs = {"D0": {"type": "object"}}
    for i in range(1, 30):
        ref = {"allOf": [{"$ref": f"#/$defs/D{i - 1}"}, {"type": "object"}]}
        defs[f"D{i}"] = {"type": "object", "properties": {"a": ref, "b": ref}}
    with pytest.raises(SchemaGrammarError, match="more than 256"):  # fails before: 2**29 inlined copies
        json_value_ebnf({"$defs": defs, "$ref": "#/$defs/D29"}, SPELLINGS, "p", True)
