"""Gemma 4's notation writes a required name that `properties` does not list, with the schema `additionalProperties`
gives it (gateway/grammars/required.py, as the JSON grammars do): it never wrote one, and took a call without it.
Checked on the family's grammar and parser: a call is taken iff `jsonschema` validates the arguments read back."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest
import xgrammar as xg
from tokenizers import Tokenizer

from gateway.families.gemma4.grammar import build_grammar
from gateway.grammars.json import SchemaGrammarError
from gateway.grammars.safe_json import json_value_ebnf
from tests.gemma4_calls import Calls, byte_compiler, byte_tokenizer, one_tool
from tests.schema_language import atoms, sample


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return byte_tokenizer()


@pytest.fixture(scope="module")
def compiler(tokenizer: Tokenizer) -> xg.GrammarCompiler:
    return byte_compiler()


TOP = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city", "days"]}
TYPED_REST = {**TOP, "additionalProperties": {"type": "integer", "minimum": 3}}
NESTED = {"type": "object", "properties": {"o": {"$ref": "#/$defs/P"}}, "required": ["o"],
          "additionalProperties": False, "$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"}},
          "required": ["x", "y"], "additionalProperties": {"enum": [1, "s"]}}}}  # fmt: skip
BRANCHES = {"type": "object", "properties": {"k": {"type": "integer"}},
            "anyOf": [{"required": ["k"]}, {"required": ["z"]}]}  # fmt: skip
REFERENCED = {"type": "object", "properties": {"o": {"$ref": "#/$defs/P", "required": ["y", "z"]}}, "required": ["o"],
              "additionalProperties": False, "$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"},
              "y": {"type": "integer"}}, "required": ["x"], "additionalProperties": {"enum": [1, "s"]}}}}  # fmt: skip
"""A `required` beside a `$ref`: both asserted (the keywords beside once replaced the target's: `x` not required)."""
CASES = [  # each schema, the names an object drawn writes (in the order the grammar writes them), the name it is
    # nested under (its other names then refused there by `additionalProperties: false`), and candidates
    (TOP, ["city", "days"], None, [{"city": "x", "days": 1}, {"city": "x", "days": {"q": [None]}}, {"city": "x"}]),
    (TYPED_REST, ["city", "days"], None, [{"city": "x", "days": 3}, {"city": "x", "days": 2}, {"city": "x"}]),
    (NESTED, ["x", "y"], "o", [{"o": {"x": 1, "y": "s"}}, {"o": {"x": 1, "y": 2}}, {"o": {"x": 1}}]),
    (BRANCHES, ["k", "z"], None, [{"k": 1}, {"z": 0}, {"k": 1, "z": [0]}, {}, {"k": "1", "z": 0}]),
    (
        REFERENCED,
        ["x", "y", "z"],
        "o",
        [
            {"o": {"x": 1, "y": 2, "z": "s"}},
            {"o": {"y": 2, "z": 1}},
            {"o": {"x": 1, "y": 2}},
            {"o": {"x": 1, "y": 2, "z": 2}},
        ],
    ),
]


@pytest.mark.parametrize(("schema", "names", "nest", "candidates"), CASES)
def test_calls_are_taken_iff_their_arguments_validate(
    tokenizer: Tokenizer,
    compiler: xg.GrammarCompiler,
    schema: dict[str, Any],
    names: list[str],
    nest: str | None,
    candidates: list[dict[str, Any]],
) -> None:
    """Seeded: objects drawn from the names, the schema's literals and bounds (schema_language.sample), at the top
    or under `nest`; written in Gemma's notation, read back by the parser as written."""
    calls = Calls(tokenizer, compiler, schema)
    validator = jsonschema.Draft202012Validator(schema)
    values: list[Any] = []
    atoms(schema, [], values)
    rng = random.Random(17)
    verdicts: dict[str, tuple[bool, bool]] = {}
    drawn = [{n: sample(rng, names, values, 1) for n in names if rng.random() < 0.5} for _ in range(300)]
    for arguments in candidates + [{nest: d} if nest and rng.random() < 0.75 else d for d in drawn]:
        taken, read = calls.read(arguments)
        assert read == arguments  # the parser reads the notation as written
        verdicts[json.dumps(read)] = (taken, validator.is_valid(read))
    assert {valid for _, valid in verdicts.values()} == {True, False}  # the candidates hold both
    wrong = [text for text, (taken, valid) in verdicts.items() if taken != valid]
    assert not wrong, wrong  # fails before: an object without the unlisted name taken, one with it refused


def test_a_value_of_any_schema_is_offered(tokenizer: Tokenizer, compiler: xg.GrammarCompiler) -> None:
    """`{}`, `true` and a name declared with `additionalProperties` absent take any value in the notation, but not
    none (`true` took no schema: any arguments)."""
    for schema in (
        {"type": "object", "properties": {"v": {}}, "required": ["v"]},
        {"type": "object", "required": ["v"]},
        {"type": "object", "properties": {"v": True}, "required": ["v"]},
    ):
        calls = Calls(tokenizer, compiler, schema)
        for value in (1, -2.5, "s", "", None, True, [1, "a"], {"k": [None]}, {}):
            assert calls.read({"v": value}) == (True, {"v": value}), (schema, value)
        assert calls.read({}) == (False, {})  # fails before on the last two: `{}` taken, `v` never required


NOTHING = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"],
           "additionalProperties": False}  # fmt: skip


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        (NOTHING, ""),
        ({"type": "object", "properties": {"o": NOTHING}}, ".properties.o"),
        ({"type": "object", "properties": {"o": {"$ref": "#/$defs/N", "required": ["b"]}},
          "$defs": {"N": {"type": "object", "additionalProperties": False}}}, ".properties.o"),
        ({"type": "object", "properties": {"o": {"anyOf": [{"type": "null"}, NOTHING]}}}, ".properties.o.anyOf[1]"),
    ],
)  # fmt: skip
def test_a_name_that_cannot_be_declared_is_refused_under_strict(
    tokenizer: Tokenizer, schema: dict[str, Any], where: str
) -> None:
    """No object matches (`additionalProperties: false`): a 400 naming the `required` under strict, as the JSON
    grammars refuse it (required.py); best effort builds (the name not enforced, as there)."""
    with pytest.raises(SchemaGrammarError) as refused:  # fails before: a grammar taking objects without `b`
        build_grammar(one_tool(schema, strict=True), tokenizer)
    assert refused.value.param == f"tools[0].function.parameters{where}.required" and '"b"' in str(refused.value)
    assert build_grammar(one_tool(schema), tokenizer) is not None


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"o": {"$ref": "#/$defs/Any", "required": ["b"]}}, "$defs": {"Any": {}}},
        {"type": "object", "properties": {"o": {"$ref": "#/$defs/N", "required": ["b"]}},
         "$defs": {"N": {"type": "object", "additionalProperties": False}}},
        REFERENCED,
    ],
)  # fmt: skip
def test_a_required_beside_a_ref_is_refused_where_the_json_grammars_refuse_it(
    tokenizer: Tokenizer, schema: dict[str, Any]
) -> None:
    """Under strict both refuse the same `required` (the target says no type; no object matches both), or neither."""
    param = "tools[0].function.parameters"
    refusals = []
    for build in (
        lambda: build_grammar(one_tool(schema, strict=True), tokenizer),
        lambda: json_value_ebnf(schema, ("<|im_end|>",), param, True, exact=True),
    ):
        try:
            build()
            refusals.append(None)
        except SchemaGrammarError as exc:
            refusals.append(exc.param)
    assert refusals[0] == refusals[1]
    assert refusals[0] in (None, f"{param}.properties.o.required") and (refusals[0] is None) == (schema is REFERENCED)
