"""The shape check of client JSON schemas: what it refuses before any grammar is built."""

from __future__ import annotations

import pytest

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
