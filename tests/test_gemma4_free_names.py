"""Gemma 4's notation writes the names `properties` does not list as xgrammar 0.2.9 writes them for the other
families' JSON: after the declared ones, typed by `additionalProperties` (`true`, `{}` or a schema), else by
`unevaluatedProperties` (without `properties` too: the values were free, a 400 under strict); none where neither is
said (xgrammar writes none: docs/schemas.md) and none where the one read is false (`{"unevaluatedProperties":
false}` is `{}` alone). It refused every free name beside `properties`, and took any object for
`unevaluatedProperties: false`. A free name is none of the declared ones (the parser, last wins, would read a
declared name's second value), which xgrammar does not exclude, and one of the XML styles' free names
(`[A-Za-z_][A-Za-z0-9_]*`: `free_names`)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import xgrammar as xg

from gateway.families.gemma4.grammar import build_grammar
from gateway.grammars.json import SchemaGrammarError
from tests.gemma4_calls import Calls, byte_compiler, byte_tokenizer, one_tool
from tests.schema_language import accepts, atoms, sample

A = {"a": {"type": "integer"}, "ab": {"type": "string"}}
EXTRA = ["b", "a0", "abc", "_k", "B"]
"""Free names beside the declared `a`, `ab`: none of them, some a declared name's extension."""


def _tool(o: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"o": o}}


CASES = [  # parameters (one property `o`, the object under test), candidates beside the seeded draws
    (_tool({"type": "object", "properties": A, "additionalProperties": True}),
     [{"o": {"a": 1, "b": 2}}, {"o": {"b": {"c": [1]}}}, {"o": {"b": 2, "a": 1}}, {"o": {"a": "s"}}]),
    (_tool({"type": "object", "properties": A, "additionalProperties": {}, "required": ["ab"]}),
     [{"o": {"ab": "s", "abc": 2}}, {"o": {"abc": 2}}, {"o": {"a": 1, "ab": "s", "_k": None}}]),
    (_tool({"type": "object", "properties": A, "additionalProperties": {"type": "string"}}),
     [{"o": {"a": 1, "b": "s"}}, {"o": {"a": 1, "b": 2}}, {"o": {"_k": "s", "a0": "t"}}]),
    (_tool({"properties": A, "unevaluatedProperties": {"type": "integer"}}),
     [{"o": {"a": 1, "b": 2}}, {"o": {"a": 1, "b": "s"}}]),
    (_tool({"type": "object", "properties": A}), [{"o": {"a": 1}}, {"o": {"a": 1, "b": 2}}]),
    (_tool({"type": "object", "properties": A, "additionalProperties": True, "unevaluatedProperties": False}),
     [{"o": {"a": 1, "b": 2}}]),
    (_tool({"type": "object", "additionalProperties": {"type": "integer"}}),
     [{"o": {}}, {"o": {"b": 1, "a0": 2}}, {"o": {"b": "s"}}]),
    (_tool({"unevaluatedProperties": False}), [{"o": {}}, {"o": {"b": 1}}, {"o": 1}]),
    (_tool({"type": "object", "unevaluatedProperties": False}), [{"o": {}}, {"o": {"b": 1}}]),
    (_tool({"type": "object", "properties": A, "unevaluatedProperties": False}),
     [{"o": {"a": 1, "b": 2}}, {"o": {"a": 1}}, {"o": {}}]),
]  # fmt: skip


@pytest.mark.parametrize(("parameters", "candidates"), CASES)
def test_free_names_are_written_as_xgrammar_writes_them(
    parameters: dict[str, Any], candidates: list[dict[str, Any]]
) -> None:
    """Seeded: objects of the declared and free names (schema_language.sample) under `o`, written in Gemma's notation
    and read back by the parser as written; a call is taken (best effort) iff xgrammar's JSON grammar of the schema
    takes the arguments."""
    calls = Calls(byte_tokenizer(), byte_compiler(), parameters, strict=None)
    reference = str(xg.Grammar.from_json_schema(json.dumps(parameters), any_whitespace=False))
    names: list[str] = []
    values: list[Any] = []
    atoms(parameters["properties"]["o"], names, values)
    names += EXTRA
    rng = random.Random(17)
    drawn = [{"o": sample(rng, names, values, 1)} for _ in range(150)]
    verdicts: dict[str, tuple[bool, bool]] = {}
    for arguments in candidates + drawn:
        taken, read = calls.read(arguments)
        assert read == arguments  # the parser reads the notation as written
        verdicts[json.dumps(read)] = (taken, accepts(reference, json.dumps(read)))
    assert {xgr for _, xgr in verdicts.values()} == {True, False}
    wrong = [text for text, (taken, xgr) in verdicts.items() if taken != xgr]
    assert not wrong, wrong  # fails before: `o:{a:1,b:2}` refused; `o:{b:1}` taken beside unevaluatedProperties false


def test_a_free_name_is_a_name_and_no_declared_one() -> None:
    """xgrammar lets a free name repeat a declared one (`{"a": 1, "a": "s"}`), which the parser would read as `a`'s
    last value against its schema: Gemma's free name is the XML styles' (`[A-Za-z_][A-Za-z0-9_]*`) less the declared
    names, a declared name's prefix and extensions free. Other keys xgrammar takes (`x.y`, `$k`, `0a`) are not
    written: a narrowing (docs), every call written still meets the schema."""
    parameters = _tool({"type": "object", "properties": A, "additionalProperties": True})
    calls = Calls(byte_tokenizer(), byte_compiler(), parameters, strict=None)
    reference = str(xg.Grammar.from_json_schema(json.dumps(parameters), any_whitespace=False))
    assert not calls.read({"o": {"b": 1, "a": "s"}})[0]  # after a free name, `a` is no free name
    for taken in ({"o": {"b": 1, "abc": "s", "A": 2}}, {"o": {"ab": "s", "a0": 1}}):
        assert calls.read(taken)[0] and accepts(reference, json.dumps(taken))
    for key in ("x.y", "$k", "0a"):
        arguments = {"o": {"a": 1, key: 2}}
        assert calls.read(arguments) == (False, arguments) and accepts(reference, json.dumps(arguments))


def test_free_names_under_strict() -> None:
    """Strict: free names typed by additionalProperties' schema are enforced, so the tool builds and types them
    (beside `properties` or not: without, the values' schema was a 400)."""
    for o in ({"type": "object", "properties": A, "additionalProperties": {"type": "integer"}},
              {"type": "object", "additionalProperties": {"type": "integer"}}):  # fmt: skip
        calls = Calls(byte_tokenizer(), byte_compiler(), _tool(o))
        assert calls.read({"o": {"b": 2}})[0] and not calls.read({"o": {"b": "s"}})[0]


def test_free_values_with_no_format_leave_the_free_names_out() -> None:
    """additionalProperties' schema that cannot be spelled out (a dangling `$ref`): the declared members are still
    enforced, with no free name (as before), and without `properties` the object's values are free (as before);
    under strict a 400 naming additionalProperties."""
    parameters = _tool({"type": "object", "properties": A, "additionalProperties": {"$ref": "#/$defs/none"}})
    calls = Calls(byte_tokenizer(), byte_compiler(), parameters, strict=None)
    assert calls.read({"o": {"a": 1}})[0] and not calls.read({"o": {"a": "s"}})[0]
    assert not calls.read({"o": {"a": 1, "b": {}}})[0]
    untyped = _tool({"type": "object", "additionalProperties": {"$ref": "#/$defs/none"}})
    assert Calls(byte_tokenizer(), byte_compiler(), untyped, strict=None).read({"o": {"b": "s"}})[0]  # any object
    for refused_parameters in (parameters, untyped):
        with pytest.raises(SchemaGrammarError) as refused:
            build_grammar(one_tool(refused_parameters, strict=True), byte_tokenizer())
        assert refused.value.param == "tools[0].function.parameters.properties.o.additionalProperties"
