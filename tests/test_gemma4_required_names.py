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

from backends.tiktoken_bpe import tokenizer_from_ranks
from gateway.families.gemma4.grammar import build_grammar
from gateway.families.gemma4.markers import QUOTE, TOOL_CALL, TOOL_CALL_END
from gateway.grammars.json import SchemaGrammarError
from gateway.types import ChatRequest
from tests.schema_language import atoms, sample
from tests.test_gemma4 import SPECIALS, ids_of, parse

STOP = 261


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return tokenizer_from_ranks({bytes([b]): b for b in range(256)}, SPECIALS, r"\s+|\S+")


@pytest.fixture(scope="module")
def compiler(tokenizer: Tokenizer) -> xg.GrammarCompiler:
    strings = [tokenizer.id_to_token(i) or "" for i in range(tokenizer.get_vocab_size())]
    return xg.GrammarCompiler(xg.TokenizerInfo(strings, vocab_type=xg.VocabType.BYTE_LEVEL, stop_token_ids=[STOP]))


def _request(parameters: dict[str, Any], strict: bool | None = None) -> ChatRequest:
    """One tool `f`, `strict` omitted where None (best effort; `strict: false` takes any arguments)."""
    function = {"name": "f", "parameters": parameters} | ({} if strict is None else {"strict": strict})
    return ChatRequest(messages=[], tools=[{"type": "function", "function": function}], tool_choice="required")


def notation(value: Any) -> list[str]:
    """`value` in Gemma's object notation, as `ids_of` parts (strings between quote tokens, no spaces)."""
    if isinstance(value, str):
        return [QUOTE, value, QUOTE]
    if isinstance(value, (dict, list)):
        pairs = value.items() if isinstance(value, dict) else ((None, v) for v in value)
        parts = ["{" if isinstance(value, dict) else "["]
        for i, (key, item) in enumerate(pairs):
            parts += ([","] if i else []) + ([f"{key}:"] if key is not None else []) + notation(item)
        return [*parts, "}" if isinstance(value, dict) else "]"]
    return [json.dumps(value)]


class Calls:
    """One tool `f` with `parameters`: whether its grammar takes a call, and the arguments the parser reads back."""

    def __init__(self, tokenizer: Tokenizer, compiler: xg.GrammarCompiler, parameters: dict[str, Any]):
        grammar = build_grammar(_request(parameters, strict=True), tokenizer)
        assert grammar is not None
        self._compiled = compiler.compile_structural_tag(grammar.text)
        self._tokenizer = tokenizer

    def read(self, arguments: dict[str, Any]) -> tuple[bool, Any]:
        ids = ids_of(self._tokenizer, TOOL_CALL, "call:f", *notation(arguments), TOOL_CALL_END)
        matcher = xg.GrammarMatcher(self._compiled)
        taken = all(matcher.accept_token(t) for t in ids) and matcher.accept_token(STOP)
        calls = parse(self._tokenizer, ids).tool_calls
        return taken, json.loads(calls[0].arguments_raw)


TOP = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city", "days"]}
TYPED_REST = {**TOP, "additionalProperties": {"type": "integer", "minimum": 3}}
NESTED = {"type": "object", "properties": {"o": {"$ref": "#/$defs/P"}}, "required": ["o"],
          "additionalProperties": False, "$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"}},
          "required": ["x", "y"], "additionalProperties": {"enum": [1, "s"]}}}}  # fmt: skip
BRANCHES = {"type": "object", "properties": {"k": {"type": "integer"}},
            "anyOf": [{"required": ["k"]}, {"required": ["z"]}]}  # fmt: skip
CASES = [  # each schema, the names an object drawn writes (in the order the grammar writes them), the name it is
    # nested under (its other names then refused there by `additionalProperties: false`), and candidates
    (TOP, ["city", "days"], None, [{"city": "x", "days": 1}, {"city": "x", "days": {"q": [None]}}, {"city": "x"}]),
    (TYPED_REST, ["city", "days"], None, [{"city": "x", "days": 3}, {"city": "x", "days": 2}, {"city": "x"}]),
    (NESTED, ["x", "y"], "o", [{"o": {"x": 1, "y": "s"}}, {"o": {"x": 1, "y": 2}}, {"o": {"x": 1}}]),
    (BRANCHES, ["k", "z"], None, [{"k": 1}, {"z": 0}, {"k": 1, "z": [0]}, {}, {"k": "1", "z": 0}]),
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
        build_grammar(_request(schema, strict=True), tokenizer)
    assert refused.value.param == f"tools[0].function.parameters{where}.required" and '"b"' in str(refused.value)
    assert build_grammar(_request(schema), tokenizer) is not None
