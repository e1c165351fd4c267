"""Definitions no `$ref` reaches are no part of a schema's values (gateway/grammars/used_defs.py): not checked
under strict, not folded, the grammar as xgrammar writes it (it converts only the definitions it reaches)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.grammars.safe_json import json_value_ebnf
from gateway.grammars.unenforced import check_strict_schemas, unenforced_keywords
from gateway.grammars.used_defs import used_definitions
from gateway.types import ChatRequest

SPELLINGS = ("<|im_end|>",)
UNUSED = {"Loose": {"minimum": 3}, "Negated": {"not": {"type": "string"}},
          "Listed": {"enum": ["a", "b"], "format": "idn-hostname"}}  # fmt: skip
POINT = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"], "additionalProperties": False}


def _tool(parameters: dict[str, Any]) -> ChatRequest:
    function = {"name": "f", "parameters": parameters, "strict": True}
    return ChatRequest(messages=[], tools=[{"type": "function", "function": function}])


@pytest.mark.parametrize("key", ["$defs", "definitions"])
def test_an_unused_definition_is_not_checked_under_strict(key: str) -> None:
    """Fails before: each unused entry's keyword found (`minimum` untyped, `not`, values beside a format), a 400
    under strict, and the exact grammar refused the values no value can meet."""
    schema = {"type": "object", "properties": {"at": {"$ref": f"#/{key}/Point"}}, key: {"Point": POINT, **UNUSED}}
    assert unenforced_keywords(schema, "p") == []
    check_strict_schemas(_tool(schema))
    without = {"type": "object", "properties": {"at": {"$ref": f"#/{key}/Point"}}, key: {"Point": POINT}}
    assert json_value_ebnf(schema, SPELLINGS, "p", True, exact=True) == json_value_ebnf(without, SPELLINGS, "p", True)


@pytest.mark.parametrize(
    ("ref", "found"),
    [
        ("#/$defs/Loose", [("p.$defs.Loose", "minimum")]),  # reached directly
        ("#/$defs/Via", [("p.$defs.Loose", "minimum")]),  # through another entry
        ("#/$defs/Holder/properties/n", [("p.$defs.Loose", "minimum")]),  # a pointer into an entry reaches it whole
        ("#loose", [("p.$defs.Negated", "not"), ("p.$defs.Loose", "minimum")]),  # an anchor: nothing left out
    ],
)
def test_a_definition_a_reference_reaches_is_checked(ref: str, found: list[tuple[str, str]]) -> None:
    defs = {"Via": {"$ref": "#/$defs/Loose"}, "Holder": {"type": "object", "properties": {"n": {"$ref": "#/$defs/Via"}}},
            "Loose": {"$anchor": "loose", "minimum": 3}, "Negated": {"not": {"type": "string"}}}  # fmt: skip
    schema = {"type": "object", "properties": {"a": {"$ref": ref}}, "$defs": defs}
    assert unenforced_keywords(schema, "p") == found


def test_used_definitions_leaves_out_only_unreached_entries_at_any_depth() -> None:
    nested = {"anyOf": [{"$defs": {"Y": {"type": "null"}, "Z": {"minimum": 1}}}, {"$ref": "#/anyOf/0/$defs/Y"}]}
    assert used_definitions(nested) == {"anyOf": [{"$defs": {"Y": {"type": "null"}}}, {"$ref": "#/anyOf/0/$defs/Y"}]}
    named = {"type": "object", "properties": {"$defs": {"$ref": "#/$defs/A"}}, "$defs": {"A": {}, "B": {}}}
    assert used_definitions(named)["$defs"] == {"A": {}}  # a property named `$defs` is no definitions map
    all_used = {"properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {}}}
    assert used_definitions(all_used) is all_used  # the very same object: its grammar byte for byte as before
    for unsure in ({"$ref": "other.json#/$defs/A"}, {"$dynamicRef": "#A"}, {"$ref": "#/$defs/A%20B"},
                   {"$ref": "#/$defs"}, {"$ref": "#/$defs/Missing"}, {"$id": "x", "$ref": "#/$defs/A"}):  # fmt: skip
        schema = {"properties": {"a": unsure}, "$defs": {"A": {}, "A B": {}, "C": {}}}
        assert used_definitions(schema) is schema
