"""Gemma 4's notation writes `enum` / `const` values itself: only those the keywords beside them admit, as the JSON
grammars keep them (all_of.admitted_values); a union branch whose values they all refuse admits nothing and is left
out. It wrote every listed value (`"bb"` beside `maxLength: 1`, `"b"` beside `pattern: ^a`) under strict."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from tests.gemma4_calls import Calls, byte_compiler, byte_tokenizer

CASES = [  # (the schema of a required property `k`, candidate values)
    ({"enum": ["a", "bb"], "maxLength": 1}, ["a", "bb"]),
    ({"enum": ["ab", "b", 3], "pattern": "^a"}, ["ab", "b", 3]),
    ({"const": "ab", "pattern": "b$"}, ["ab"]),
    ({"anyOf": [{"enum": ["a"], "maxLength": 0}, {"type": "integer"}]}, ["a", 1]),
    ({"type": "string", "pattern": "^a", "anyOf": [{"enum": ["ab", "b"]}, {"const": "ba"}]}, ["ab", "b", "ba"]),
]


@pytest.mark.parametrize(("schema", "values"), CASES)
def test_listed_values_are_written_only_where_their_keywords_admit_them(schema: dict[str, Any], values: list) -> None:
    parameters = {"type": "object", "properties": {"k": schema}, "required": ["k"], "additionalProperties": False}
    calls = Calls(byte_tokenizer(), byte_compiler(), parameters)
    validator = jsonschema.Draft202012Validator(parameters)
    verdicts = {json_value: validator.is_valid({"k": json_value}) for json_value in values}
    assert True in verdicts.values()
    for value, valid in verdicts.items():
        assert calls.read({"k": value})[0] is valid, value  # fails before: every listed value taken
