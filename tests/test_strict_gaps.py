"""What xgrammar 0.2.9 drops on the shared JSON grammar path, enforced exactly or refused under strict: a keyword of
one type in a schema with no type (any value written), `const` / `enum` values beside other assertions (written
alone), an array counted with no `items` (read as no items). Languages checked on xgrammar itself: the grammar takes
a value iff `jsonschema` validates it."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest

from gateway.grammars.json import SchemaGrammarError
from gateway.grammars.safe_json import json_value_ebnf
from gateway.grammars.unenforced import check_strict_schemas, strict_able, unenforced_keywords
from gateway.types import ChatRequest
from tests.schema_language import accepts, atoms, sample

SPELLINGS = ("<|im_end|>",)
LISTED = {"type": "object", "properties": {"e": {"enum": ["a", "bb", 1, 7], "maxLength": 1, "minimum": 5},
          "c": {"const": "xyz", "type": "string", "minLength": 1},
          "t": {"type": ["integer", "null"], "enum": [1, 2.5, "3", None, True]}}, "additionalProperties": False}  # fmt: skip
PATTERNED = {"type": "object", "properties": {"k": {"enum": ["a1", "b2", "a", "xa9", 3], "pattern": "a\\d"},
             "t": {"type": "string", "enum": ["ab", "abc", "b"], "pattern": "^ab$"},
             "c": {"const": "zz", "pattern": "^z+$", "maxLength": 2}}, "additionalProperties": False}  # fmt: skip
COUNTED = {"type": "object", "properties": {"one": {"type": "array", "maxItems": 1},
           "some": {"type": ["array", "null"], "minItems": 1, "maxItems": 2}}, "additionalProperties": False}  # fmt: skip
CASES = [
    (LISTED, ['{"e": "a"}', '{"e": "bb"}', '{"e": 1}', '{"e": 7}', '{"c": "xyz"}', "{}", '{"t": 1}', '{"t": 2.5}',
              '{"t": "3"}', '{"t": null}', '{"t": true}']),
    (PATTERNED, ['{"k": "a1"}', '{"k": "b2"}', '{"k": "a"}', '{"k": "xa9"}', '{"k": 3}', '{"t": "ab"}',
                 '{"t": "abc"}', '{"t": "b"}', '{"c": "zz"}']),
    (COUNTED, ['{"one": ["s"]}', '{"one": []}', '{"one": [1, 2]}', '{"some": []}', '{"some": [{}, "a"]}',
               '{"some": [1, 2, 3]}', '{"some": null}']),
]  # fmt: skip


def _language_wrong(schema: dict[str, Any], candidates: list[str]) -> list[str]:
    """The candidates and seeded values near `schema` that its strict grammar judges unlike `jsonschema`."""
    ebnf = json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    validator = jsonschema.Draft202012Validator(schema)
    names: list[str] = []
    values: list[Any] = []
    atoms(schema, names, values)
    rng = random.Random(17)
    texts = {json.dumps(sample(rng, names, values), separators=(", ", ": ")) for _ in range(120)} | set(candidates)
    return [text for text in texts if accepts(ebnf, text) != validator.is_valid(json.loads(text))]


@pytest.mark.parametrize(("schema", "candidates"), CASES)
def test_the_grammar_takes_what_the_schema_validates(schema: dict[str, Any], candidates: list[str]) -> None:
    """Fails before: `"bb"`, `1`, `2.5`, `true` taken beside maxLength / minimum / type; `["s"]` refused, `minItems`
    a refusal; values beside a `pattern` a gap (not checked: refused under strict)."""
    assert unenforced_keywords(schema, "p") == []
    assert not _language_wrong(schema, candidates)


@pytest.mark.parametrize(
    ("schema", "place"),
    [
        ({"type": "object", "properties": {"o": {"minimum": 3}}}, ("p.properties.o", "minimum")),
        ({"type": "array", "items": {"required": ["a"]}}, ("p.items", "required")),
        ({"type": "object", "additionalProperties": {"maxItems": 1}}, ("p.additionalProperties", "maxItems")),
        ({"enum": ["a"], "maxLength": 0}, ("p", "enum")),  # no value left: the schema admits none
        (
            {"type": "object", "properties": {"k": {"enum": ["ab", "b"], "pattern": "(?<=a)b"}}},
            ("p.properties.k", "enum"),
        ),
        ({"type": "object", "properties": {"k": {"const": "b", "pattern": "^a"}}}, ("p.properties.k", "const")),
    ],
)
def test_what_no_grammar_enforces_is_refused_under_strict(schema: dict[str, Any], place: tuple[str, str]) -> None:
    """Fails before: nothing found, and the strict grammar took `1`, `{}`, `[1, 2]`, `"a"`, `"b"`."""
    assert unenforced_keywords(schema, "p") == [place]
    tool = {"type": "function", "function": {"name": "f", "parameters": schema, "strict": True}}
    with pytest.raises(SchemaGrammarError) as refused:
        check_strict_schemas(ChatRequest(messages=[], tools=[tool]))
    assert refused.value.param == f"tools[0].function.parameters{place[0][1:]}.{place[1]}"
    assert not strict_able({"function": {"parameters": schema}})
    assert json_value_ebnf(schema, SPELLINGS, "p", False)  # best effort: built, the keyword not enforced


@pytest.mark.parametrize(
    "schema",
    [
        {"allOf": [{"type": "integer"}, {"minimum": 3}]},  # folded: the minimum is an integer's
        {"type": "number", "anyOf": [{"minimum": 3}, {"maximum": -3}]},  # the type folded into each branch
        {"properties": {"a": {"type": "string"}}, "minItems": 2},  # read as an object: minItems asserts nothing
        {"type": "integer", "if": {"minimum": 5}},  # no grammar writes an `if`'s schema
    ],
)
def test_a_keyword_whose_type_is_said_or_read_is_not_found(schema: dict[str, Any]) -> None:
    assert unenforced_keywords(schema, "p") == []


@pytest.mark.parametrize("sibling", [{"multipleOf": 0}, {"minimum": "x"}, {"type": "integer", "maximum": []}])
def test_values_beside_a_keyword_the_validator_cannot_read_are_a_gap_not_a_crash(sibling: dict[str, Any]) -> None:
    """The doors do not check a bound's kind: jsonschema raised ZeroDivisionError / TypeError (a 500)."""
    schema = {"type": "object", "properties": {"k": {"enum": [1, 2], **sibling}}}
    assert unenforced_keywords(schema, "p") == [("p.properties.k", "enum")]
    assert json_value_ebnf(schema, SPELLINGS, "p", False)
    with pytest.raises(SchemaGrammarError, match="cannot be checked"):
        json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
