"""A required name that `properties` does not list: xgrammar 0.2.9 never wrote it (`{"a": "x"}` taken where `b` is
required, `{"a": "x", "b": 1}` refused); declared before xgrammar with the schema `additionalProperties` gives it.
Checked on xgrammar itself: the grammar takes a candidate value iff `jsonschema` validates it."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest

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


def test_xml_arguments_write_the_required_name() -> None:
    ebnf = xml_value_ebnf(UNLISTED, "qwen_xml", SPELLINGS, "p", True)
    assert accepts(ebnf, "<parameter=a>\nx\n</parameter>\n<parameter=b>\n1\n</parameter>")
    assert not accepts(ebnf, "<parameter=a>\nx\n</parameter>")  # fails before: taken, b never written


NOTHING = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"],
           "additionalProperties": False}  # fmt: skip
PATTERNED = {"type": "object", "patternProperties": {"^b": {"type": "integer"}}, "required": ["b"]}


@pytest.mark.parametrize(
    "schema",
    [
        NOTHING,
        PATTERNED,
        {"type": "object", "properties": {"o": NOTHING}},
        {**UNEVALUATED, "unevaluatedProperties": False},
    ],
)
def test_a_name_that_cannot_be_declared_is_refused_under_strict(schema: dict[str, Any]) -> None:
    where = "p.properties.o" if "o" in schema.get("properties", {}) else "p"
    with pytest.raises(SchemaGrammarError) as refused:  # fails before: a grammar taking objects without b
        json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    assert refused.value.param == f"{where}.required" and '"b"' in str(refused.value)
    assert unenforced_keywords(schema, "p") == [(where, "required")]
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
