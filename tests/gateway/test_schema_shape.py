"""The shape check of client JSON schemas: what it refuses before any grammar is built."""

from __future__ import annotations

import json

import pytest
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string

from gateway.errors import APIError
from gateway.validation.schema_bounds import check_schema


@pytest.mark.parametrize("key", ["anyOf", "oneOf"])
def test_an_empty_alternative_list_is_a_400(key):
    """Found by probing: `{"anyOf": []}` admits no value, so the grammar matched nothing and a 200 came back
    with `{"a": }` as json_schema content, or raw `<tool_call>` markup under tool_choice required."""
    schema = {"type": "object", "properties": {"a": {key: []}}}
    with pytest.raises(APIError) as error:
        check_schema(schema, "response_format.json_schema.schema", object_root=False)
    assert error.value.status == 400 and error.value.param == f"response_format.json_schema.schema.properties.a.{key}"


def test_an_empty_all_of_admits_any_value():
    check_schema({"type": "object", "properties": {"a": {"allOf": []}}}, "p", object_root=True)


@pytest.mark.parametrize("types", [[{}], [["string"]], [None]])
def test_a_type_list_of_other_than_names_is_a_400(types):
    """Found by probing the doors: a `type` list holding an object crashed the check (unhashable): a 500."""
    with pytest.raises(APIError) as error:
        check_schema({"type": "object", "properties": {"a": {"type": types}}}, "p", object_root=True)
    assert error.value.status == 400 and error.value.param == "p.properties.a.type"


@pytest.mark.parametrize(
    "bounds",
    [
        {"minimum": 1e-7, "maximum": 9e-7},
        {"exclusiveMinimum": 0, "exclusiveMaximum": 1e-6},
        {"minimum": 0.1234567, "maximum": 0.1234568},
        {"minimum": 1e-300, "maximum": 2e-300},
        {"exclusiveMinimum": -1e-6, "exclusiveMaximum": 0},
    ],
)
def test_a_number_range_holding_no_value_the_grammar_writes_is_a_400(bounds):
    """Found by probing: xgrammar writes a ranged number with at most 6 decimal places, and for a range holding none
    its grammar is the empty string, so a 200 came back with '{"a": }' as strict json_schema content and as strict
    tool arguments."""
    number = {"type": "number", **bounds}
    assert _is_grammar_accept_string(xgr.Grammar.from_json_schema(json.dumps(number)), "")
    with pytest.raises(APIError) as error:
        check_schema({"type": "object", "properties": {"a": number}}, "p", object_root=True)
    assert error.value.status == 400 and error.value.param == "p.properties.a"


@pytest.mark.parametrize(
    ("bounds", "written"),
    [
        ({"minimum": 1e-6, "maximum": 1e-6}, "0.000001"),
        ({"minimum": 0.1, "maximum": 0.1}, "0.100000"),
        ({"exclusiveMinimum": 0.5, "maximum": 0.500001}, "0.500001"),
        ({"minimum": -0.1234568, "maximum": -0.123456}, "-0.123456"),
        ({"minimum": 1e-300}, "1"),
    ],
)
def test_a_number_range_holding_a_value_the_grammar_writes_passes(bounds, written):
    number = {"type": "number", **bounds}
    check_schema({"type": "object", "properties": {"a": number}}, "p", object_root=True)
    assert _is_grammar_accept_string(xgr.Grammar.from_json_schema(json.dumps(number)), written)
