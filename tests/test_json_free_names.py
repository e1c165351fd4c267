"""A JSON object's free names (`additionalProperties`) beside `properties` and `patternProperties`: xgrammar 0.2.9
wrote them as any string, so a name a pattern matches (or a declared one) took the rest's value; now none of them.
Checked on xgrammar itself against `jsonschema`."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest

from gateway.grammars.json import SchemaGrammarError, compact_json_ebnf
from gateway.grammars.json_free_names import marked_free_names
from gateway.grammars.safe_json import json_value_ebnf
from gateway.grammars.unenforced import strict_able, unenforced_keywords
from tests.schema_language import accepts, exact_verdicts

SPELLINGS = ("<|im_end|>",)
B_INTEGER = {"^b": {"type": "integer"}}
REST = {"type": "object", "properties": {"a": {"type": "string"}}, "patternProperties": B_INTEGER,
        "additionalProperties": {"enum": [1, "s"]}}  # fmt: skip
ANY_REST = {**REST, "additionalProperties": True}
UNEVALUATED = {"type": "object", "properties": {"a": {"type": "string"}}, "patternProperties": B_INTEGER,
               "unevaluatedProperties": {"type": "string"}}  # fmt: skip
REQUIRED = {"type": "object", "patternProperties": B_INTEGER, "required": ["z"],
            "additionalProperties": {"enum": [1, "s"]}}  # fmt: skip
"""No `properties`, but the required `z` is declared there (required.py): then the shape xgrammar got wrong."""
TWO = {"type": "object", "properties": {"id": {"type": "integer"}},
       "patternProperties": {"^x_[a-z]*$": {"type": "string"}, "^[a-z]*[0-9]$": {"type": "boolean"}},
       "additionalProperties": {"type": "null"}}  # fmt: skip
"""`x_q` a string, `q1` a boolean, `x_1` (neither pattern's) and `q` null."""
NESTED = {"type": "object", "properties": {"o": {"$ref": "#/$defs/O"}, "u": {"anyOf": [{"type": "string"}, REST]}},
          "$defs": {"O": TWO}}  # fmt: skip
CASES = [
    (REST, ['{"b": 1}', '{"b": "s"}', '{"a": "x", "b": "s"}', '{"a": 1}', '{"a": "x", "a": 1}', '{"z": "s"}',
            '{"a": "x", "z": 1, "b": 2}', '{"z": 2}']),
    (ANY_REST, ['{"b": 1}', '{"b": "s"}', '{"a": "x", "z": [1]}', '{"a": "x", "b": null}', '{"a": null}']),
    (UNEVALUATED, ['{"b": 1}', '{"b": "s"}', '{"z": "s"}', '{"z": 1}', '{"a": 2}']),
    (REQUIRED, ['{"z": 1}', '{"z": 1, "b": "s"}', '{"z": "s", "b": 1}', '{"z": 1, "b": 2, "y": "s"}', '{"b": 1}']),
    (TWO, ['{"q": null}', '{"x_q": "v"}', '{"q1": true}', '{"x_q": null}', '{"q1": null}', '{"x_1": null}', '{"x_1": true}',
           '{"id": 1, "q": null}', '{"id": null}']),
    (NESTED, ['{"o": {"q": null}}', '{"o": {"x_q": null}}', '{"u": {"b": 1}}', '{"u": {"b": "s"}}', '{"u": "t"}',
              '{"o": {"id": 1, "q1": false}}', '{"o": {"id": 1, "q1": null}}']),
]  # fmt: skip


def test_xgrammar_writes_a_free_name_as_any_string() -> None:
    """The gap, on xgrammar's own grammar: `b` takes the rest's value, and `a` too, its own schema unchecked."""
    ebnf = compact_json_ebnf(REST, "p")
    assert accepts(ebnf, '{"b": "s"}') and accepts(ebnf, '{"a": 1}') and accepts(ebnf, '{"a": "x", "a": 1}')
    alone = compact_json_ebnf({k: v for k, v in REST.items() if k != "properties"}, "p")
    assert accepts(alone, '{"b": 1}') and not accepts(alone, '{"z": 1}')  # no properties: pattern keys alone


@pytest.mark.parametrize(("schema", "candidates"), CASES)
def test_the_grammar_takes_what_the_schema_validates(schema: dict[str, Any], candidates: list[str]) -> None:
    ebnf, verdicts = exact_verdicts(schema, candidates, SPELLINGS)
    for text, valid in verdicts.items():
        assert accepts(ebnf, text) == valid, text  # fails before: a pattern's name took the rest's value
    assert unenforced_keywords(schema, "p") == []


@pytest.mark.parametrize(("schema", "candidates"), CASES)
def test_random_objects_taken_are_valid(schema: dict[str, Any], candidates: list[str]) -> None:
    """Seeded: objects of declared, pattern-matching and free names. A free name is written from the name class
    `[a-zA-Z_][a-zA-Z0-9_]*` and a pattern key as xgrammar writes it (the pattern's full match), so a valid object
    may be refused; none taken is invalid, and some valid ones are taken."""
    ebnf = json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    validator = jsonschema.Draft202012Validator(schema)
    declared = [*schema.get("properties", {}), "z"]  # written first, in this order (`z`: REQUIRED's, declared)
    names = ["a", "b", "bc", "z", "id", "x_q", "q1", "x_1", "o", "u", "q", "q_"]
    values = [1, 2, "s", None, True, {"b": 1}, {"b": "s"}, {"q": None}, {"x_q": "s"}]
    rng = random.Random(18)
    texts = set()
    for _ in range(400):
        chosen = sorted(rng.sample(names, rng.randrange(4)), key=lambda n: declared.index(n) if n in declared else 99)
        texts.add(json.dumps({n: rng.choice(values) for n in chosen}, separators=(", ", ": ")))
    taken = {text for text in texts if accepts(ebnf, text)}
    assert not [text for text in taken if not validator.is_valid(json.loads(text))]
    assert taken - {"{}"}


def test_a_rest_whose_names_cannot_be_kept_from_a_pattern_is_refused_under_strict() -> None:
    """Past the patterns' automaton bound: a 400 (naming first the pattern, which cannot be searched in the declared
    `a` either: claimed_names.py), the rest listed best effort too (xgrammar's grammar kept)."""
    schema = {**REST, "patternProperties": {"^[a-z]{3000}$": {"type": "integer"}}}
    with pytest.raises(SchemaGrammarError) as refused:
        json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    assert refused.value.param == "p.patternProperties"
    assert unenforced_keywords(schema, "p") == [("p", "patternProperties"), ("p", "additionalProperties")]
    assert not strict_able({"type": "function", "function": {"name": "f", "parameters": schema}})
    assert json_value_ebnf(schema, SPELLINGS, "p", True) is not None


@pytest.mark.parametrize(
    "schema",
    [
        {k: v for k, v in REST.items() if k != "properties"},  # pattern keys alone: a narrowing
        {**REST, "additionalProperties": False},
        {k: v for k, v in REST.items() if k != "additionalProperties"},  # no other name written: a narrowing
        {**REST, "properties": {}},
    ],
)
def test_other_objects_are_the_same_schema(schema: dict[str, Any]) -> None:
    """xgrammar writes these right (or narrower): their grammars byte for byte as before. (Free names beside
    `properties` alone are written as here too: tests/test_claimed_names.py.)"""
    assert marked_free_names(schema, "p", True) == (schema, {})
    assert marked_free_names(schema, "p", True)[0] is schema


def test_a_client_pattern_spelling_a_mark_is_no_mark() -> None:
    schema = {**REST, "patternProperties": {**B_INTEGER, "free-name-mark-0-0": {"type": "null"}}}
    assert list(marked_free_names(schema, "p", True)[1]) == ["free-name-mark-1-0"]
    ebnf = json_value_ebnf(schema, SPELLINGS, "p", True, exact=True)
    assert accepts(ebnf, '{"free-name-mark-0-0": null}') and not accepts(ebnf, '{"free-name-mark-0-0": 1}')
    assert accepts(ebnf, '{"z": 1}') and not accepts(ebnf, '{"b": "s"}')
