"""Gemma 4's notation reads a schema with no `type` as xgrammar 0.2.9 reads it for the other families' JSON: an
object beside `properties` / `additionalProperties` / `unevaluatedProperties`, else an array beside `items` /
`prefixItems` / `unevaluatedItems`, else any value (arguments.implied_type). It wrote every such schema as any value,
so nothing inside `{"properties": …, "required": …}` was enforced. Checked on the family's grammar and parser
against xgrammar's own JSON grammar of the same schema, and jsonschema where the two agree."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest
import xgrammar as xg

from gateway.families.gemma4.arguments import implied_type, kept_under_strict
from gateway.families.gemma4.grammar import build_grammar
from gateway.grammars.json import SchemaGrammarError
from tests.gemma4_calls import Calls, byte_compiler, byte_tokenizer, one_tool
from tests.schema_language import accepts, atoms, sample


def _tool(o: Any, defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Parameters with one property `o` of schema `o` (and `$defs`)."""
    return {"type": "object", "properties": {"o": o}} | ({"$defs": defs} if defs else {})


REQUIRED_A = {"properties": {"a": {"type": "integer"}}, "required": ["a"]}
CASES = [  # parameters; candidates beside the seeded draws; a value of another type than the one read, which JSON
    # Schema takes (without `type`, object keywords hold only of objects) and xgrammar's reading, followed here, refuses
    (_tool(REQUIRED_A), [{"o": {"a": 1}}, {"o": {}}, {"o": {"a": "s"}}, {}], {"o": 1}),
    (_tool({"additionalProperties": False}), [{"o": {}}, {"o": {"a": 1}}], {"o": "s"}),
    (_tool({"items": {"type": "integer"}, "minItems": 1, "maxItems": 2}), [{"o": [1]}, {"o": []}, {"o": [1, 2, 3]},
                                                                           {"o": ["s"]}], {"o": "s"}),
    (_tool({"items": REQUIRED_A}), [{"o": [{"a": 1}]}, {"o": [{}]}], {"o": [1]}),
    (_tool({"$ref": "#/$defs/P"}, {"P": REQUIRED_A}), [{"o": {"a": 2}}, {"o": {}}], {"o": [1]}),
    (_tool({**REQUIRED_A, "items": {"type": "integer"}, "minimum": 3}), [{"o": {"a": 1}}, {"o": {}}], {"o": [1]}),
    (_tool({"anyOf": [REQUIRED_A, {"type": "null"}]}), [{"o": {"a": 1}}, {"o": None}, {"o": {}}], {"o": 2}),
    (_tool({"type": "array"}), [{"o": []}, {"o": ["s", 1]}, {"o": "s"}], None),  # no `items`: any items
    (_tool({"enum": [1, "a", None]}), [{"o": 1}, {"o": "a"}, {"o": None}, {"o": 2}], None),
]  # fmt: skip


@pytest.mark.parametrize(("parameters", "candidates", "deviation"), CASES)
def test_an_untyped_schema_is_read_as_the_json_grammars_read_it(
    parameters: dict[str, Any],
    candidates: list[dict[str, Any]],
    deviation: dict[str, Any] | None,
) -> None:
    """Seeded: values drawn from the schema's names, literals and bounds (schema_language.sample) under `o`, written
    in Gemma's notation and read back by the parser as written; a call is taken iff xgrammar's JSON grammar of the
    schema takes the arguments, which is jsonschema's verdict too except on a value of another type."""
    calls = Calls(byte_tokenizer(), byte_compiler(), parameters)
    reference = str(xg.Grammar.from_json_schema(json.dumps(parameters), any_whitespace=False))
    validator = jsonschema.Draft202012Validator(parameters)
    names: list[str] = []
    values: list[Any] = []
    atoms(parameters, names, values)
    rng = random.Random(17)
    drawn = [{"o": sample(rng, names, values)} if rng.random() < 0.9 else {} for _ in range(200)]
    verdicts: dict[str, tuple[bool, bool]] = {}
    for arguments in candidates + ([deviation] if deviation else []) + drawn:
        taken, read = calls.read(arguments)
        assert read == arguments  # the parser reads the notation as written
        verdicts[json.dumps(read)] = (taken, accepts(reference, json.dumps(read)))
    agreed = [text for text, (_, xgr) in verdicts.items() if xgr == validator.is_valid(json.loads(text))]
    assert {verdicts[text][1] for text in agreed} == {True, False}  # both verdicts met where the references agree
    wrong = [text for text, (taken, xgr) in verdicts.items() if taken != xgr]
    assert not wrong, wrong  # fails before: `o:{}`, `o:{a:<|"|>s<|"|>}`, `o:[<|"|>s<|"|>]`… taken (any value)
    if deviation is not None:  # the one departure from JSON Schema, shared with the JSON grammars
        assert validator.is_valid(deviation) and verdicts[json.dumps(deviation)] == (False, False)


@pytest.mark.parametrize(
    ("o", "keyword"),
    [({"minimum": 3}, "minimum"), ({"multipleOf": 2, "description": "n"}, "multipleOf"), ({"minItems": 1}, "minItems"),
     ({"required": ["a"]}, "required"), ({"minProperties": 1}, "minProperties"), ({"pattern": "^a$"}, "pattern"),
     ({"maxLength": 2}, "maxLength"), ({"prefixItems": [{"type": "integer"}]}, "prefixItems"),
     ({"properties": {}, "minProperties": 1}, "minProperties"), ({"items": True, "maxLength": 1}, None),
     ({"items": True, "minItems": 1, "minimum": 3}, None)],
)  # fmt: skip
def test_an_untyped_keyword_written_as_any_value_is_refused_under_strict(
    o: dict[str, Any], keyword: str | None
) -> None:
    """With no `type` said nor read, a type's keyword is not enforced (any value is written, as xgrammar does): under
    strict a 400 naming it (it was silently any value), and the tool omitting strict is not promoted to it; best
    effort any value. A keyword of another type than the one read asserts nothing (None): kept, strict builds."""
    parameters = _tool(o)
    assert kept_under_strict(parameters) is (keyword is None)
    if keyword is None:
        assert build_grammar(one_tool(parameters, strict=True), byte_tokenizer()) is not None
        return
    with pytest.raises(SchemaGrammarError) as refused:
        build_grammar(one_tool(parameters, strict=True), byte_tokenizer())
    assert refused.value.param == f"tools[0].function.parameters.properties.o.{keyword}"
    if implied_type(o) is None:  # any value, as xgrammar takes it (else any object or array)
        calls = Calls(byte_tokenizer(), byte_compiler(), parameters, strict=None)
        assert all(calls.read({"o": v})[0] for v in (2, "s", None, [1], {"a": [True]}, {}))


def test_a_union_branch_is_judged_with_the_keywords_beside_it() -> None:
    """A branch saying only `required` beside an object's keywords is an object's (`_union` folds them): the tool
    omitting strict is still promoted; alone, `required` is any value's and is not."""
    branches = {"type": "object", "properties": {"k": {"type": "integer"}},
                "anyOf": [{"required": ["k"]}, {"required": ["z"]}]}  # fmt: skip
    assert kept_under_strict(branches) and build_grammar(one_tool(branches, strict=True), byte_tokenizer()) is not None
    assert not kept_under_strict(_tool({"anyOf": [{"required": ["k"]}, {"type": "null"}]}))
