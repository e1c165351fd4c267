"""Compact JSON grammars: one line, the schema's own property order, clear errors."""

from __future__ import annotations

import pytest
import xgrammar as xgr

from backends.checkpoint import load_checkpoint
from backends.worker.grammar import tokenizer_info
from gateway.grammars.json import SchemaGrammarError, compact_json_ebnf


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
