"""Whether a JSON value grammar takes a text (xgrammar's matcher, no vocabulary), and seeded values drawn near a
schema: tests that a grammar's language is the schema's (tests/test_any_of_siblings.py, tests/test_required_names.py)."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import xgrammar as xgr

from gateway.grammars.safe_json import json_value_ebnf

_COMPILER = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)


def accepts(ebnf: str, text: str) -> bool:
    """Whether the grammar `ebnf` takes `text` whole."""
    matcher = xgr.GrammarMatcher(_COMPILER.compile_grammar(ebnf), terminate_without_stop_token=True)
    return matcher.accept_string(text) and matcher.is_terminated()


def exact_verdicts(schema: Any, candidates: list[str], spellings: tuple[str, ...]) -> tuple[str, dict[str, bool]]:
    """The exact JSON grammar of `schema` (a tool's, `spellings` the control tokens) and each candidate's verdict by
    jsonschema, the candidates holding both valid and invalid texts (else they would not tell the schemas apart)."""
    ebnf = json_value_ebnf(schema, spellings, "p", True, exact=True)
    validator = jsonschema.Draft202012Validator(schema)
    verdicts = {text: validator.is_valid(json.loads(text)) for text in candidates}
    assert True in verdicts.values() and False in verdicts.values()
    return ebnf, verdicts


def atoms(schema: Any, names: list[str], values: list[Any]) -> None:
    """The property names (in the order met) and the literal values a schema mentions, bounds one either side."""
    if isinstance(schema, list):
        for item in schema:
            atoms(item, names, values)
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        if key == "properties":
            names += [n for n in value if n not in names]
        if key in ("const", "enum"):
            values += value if key == "enum" else [value]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            values += [value - 1, value, value + 1]
        elif isinstance(value, (dict, list)):
            atoms(value, names, values)


def sample(rng: random.Random, names: list[str], values: list[Any], depth: int = 0) -> Any:
    """A random JSON value made of the schema's names and values, near what it admits and what it refuses."""
    kind = rng.randrange(4 if depth < 2 else 2)
    if kind == 0:
        return rng.choice([*values, "", "a", "aa", "abcd", 0, 2.5, True, None])
    if kind == 1:
        return rng.choice(values) if values and rng.random() < 0.5 else rng.randrange(-2, 12)
    if kind == 2:
        return [sample(rng, names, values, depth + 1) for _ in range(rng.randrange(4))]
    return {n: sample(rng, names, values, depth + 1) for n in names if rng.random() < 0.5}
