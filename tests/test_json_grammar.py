"""Compact JSON grammars: one line, the schema's own property order, clear errors."""

from __future__ import annotations

import json

import pytest
import xgrammar as xgr

from backends.checkpoint import load_checkpoint
from backends.worker.grammar import tokenizer_info
from gateway.grammars.json import SchemaGrammarError, compact_json_ebnf
from gateway.grammars.safe_json import safe_json_ebnf


@pytest.fixture(scope="module")
def compiler() -> xgr.GrammarCompiler:
    c = load_checkpoint()
    return xgr.GrammarCompiler(tokenizer_info(c, c.config.vocab_size))


def accepts(compiler: xgr.GrammarCompiler, schema: dict, text: str) -> bool:
    matcher = xgr.GrammarMatcher(compiler.compile_grammar(compact_json_ebnf(schema, "p")))
    return matcher.accept_string(text) and matcher.accept_token(2)


def test_properties_keep_their_declared_order(compiler):
    schema = {"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "integer"}}}
    schema["required"] = ["zeta", "alpha"]
    assert accepts(compiler, schema, '{"zeta": 1, "alpha": 2}')
    assert not accepts(compiler, schema, '{"alpha": 2, "zeta": 1}')


def test_one_line_with_fixed_separators(compiler):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert accepts(compiler, schema, '{"a": 1}')
    assert not accepts(compiler, schema, '{\n  "a": 1\n}')
    assert not accepts(compiler, schema, '{"a":1}')


def test_unenforceable_schema_names_its_param():
    with pytest.raises(SchemaGrammarError) as info:
        compact_json_ebnf({"$ref": "#/nope"}, "tools[3].function.parameters")
    assert info.value.param == "tools[3].function.parameters"
    assert "#/nope" in str(info.value)


@pytest.mark.parametrize(
    ("schema", "answer"),
    [
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, '{{"a": "x{}y"}}'),
        ({"type": "object", "additionalProperties": {"type": "integer"}}, '{{"x{}y": 1}}'),
    ],
    ids=["value", "key"],
)
def test_spelling_safe_strings_take_control_characters_only_escaped(compiler, schema, answer):
    """JSON takes U+0000-U+001F in a string (a value or a key) only escaped: `json.loads` refuses them raw. The
    spelling-safe strings let a raw NUL through (found by tests/grammar_walks.py on gemma4: `{"answer": "\x00", …}`)."""
    compiled = compiler.compile_grammar(safe_json_ebnf(schema, ("<|im",), "p", True))
    for code in range(32):
        assert not xgr.GrammarMatcher(compiled).accept_string(answer.format(chr(code))), code
        escaped = answer.format(f"\\u{code:04x}")
        matcher = xgr.GrammarMatcher(compiled)
        assert json.loads(escaped) and matcher.accept_string(escaped) and matcher.accept_token(2), code
