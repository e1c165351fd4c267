"""XML-style arguments (`glm_xml`, `qwen_xml`): a free parameter name (`additionalProperties`) is never a declared one,
and no parameter is written twice; a declared name's prefix and extensions stay free names."""

from __future__ import annotations

from typing import Any

import pytest
import xgrammar as xg

from gateway.grammars.free_names import free_name_rules
from gateway.grammars.safe_json import xml_value_ebnf

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "name": {"type": "string"}},
    "required": ["n"],
    "additionalProperties": True,
}
LAYOUT = {  # a parameter as each style writes it
    "glm_xml": lambda k, v: f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>",
    "qwen_xml": lambda k, v: f"<parameter={k}>\n{v}\n</parameter>\n",
}


def _takes(ebnf: str, text: str) -> bool:
    """Whether the grammar `ebnf` takes `text` whole (compiled without a vocabulary: only the text counts)."""
    compiled = xg.GrammarCompiler(xg.TokenizerInfo([]), cache_enabled=False).compile_grammar(ebnf)
    matcher = xg.GrammarMatcher(compiled, terminate_without_stop_token=True)
    return matcher.accept_string(text) and matcher.is_terminated()


def _arguments(style: str, schema: dict[str, Any], *parameters: tuple[str, str]) -> bool:
    ebnf = xml_value_ebnf(schema, style, ("<|im_end|>",), "p", True)
    return _takes(ebnf, "".join(LAYOUT[style](k, v) for k, v in parameters))


@pytest.mark.parametrize("style", ["glm_xml", "qwen_xml"])
def test_a_declared_name_is_no_free_name(style: str) -> None:
    """xgrammar's styles let a free parameter take a declared name: `n` again with an empty value (no integer), or
    the optional `name` after a free parameter, its schema unchecked (both taken before)."""
    assert _arguments(style, SCHEMA, ("n", "1"), ("extra", "x"))
    assert not _arguments(style, SCHEMA, ("n", "1"), ("n", ""))
    assert not _arguments(style, SCHEMA, ("n", "1"), ("extra", "x"), ("name", "[1]"))
    assert not _arguments(style, SCHEMA, ("n", "1"), ("name", "a"), ("name", "b"))


@pytest.mark.parametrize("style", ["glm_xml", "qwen_xml"])
def test_a_declared_name_s_prefixes_and_extensions_stay_free(style: str) -> None:
    for free in ("na", "nam", "n_", "name1", "names", "N", "_n", "x"):
        assert _arguments(style, SCHEMA, ("n", "1"), (free, "v")), free


@pytest.mark.parametrize("style", ["glm_xml", "qwen_xml"])
def test_no_declared_parameter_twice_without_free_names(style: str) -> None:
    closed = {**SCHEMA, "additionalProperties": False}
    assert _arguments(style, closed, ("n", "1"), ("name", "a"))
    assert not _arguments(style, closed, ("n", "1"), ("n", "2"))
    assert not _arguments(style, closed, ("n", "1"), ("name", "a"), ("name", "b"))


def test_free_names_within_the_bound() -> None:
    """qwen_xml's free names stay within 64 characters; one that leaves the declared names' prefixes after its
    first character may come up to 7 short (the tails share their rules), never a declared name."""
    ebnf = "root ::= name\n" + free_name_rules(["n", "name", "na1", "x_y", "Z"], 64, "name")
    for name in ("q" * 64, "n" + "q" * 56, "nam" + "e" * 54, "x_" + "y" * 55, "Zz", "na", "nam", "na12", "x_", "x"):
        assert _takes(ebnf, name), name
    for name in ("q" * 65, "n" + "q" * 64, "n", "name", "na1", "x_y", "Z", "", "1a", "a-b"):
        assert not _takes(ebnf, name), name
    unbounded = "root ::= name\n" + free_name_rules(["n", "name"], None, "name")
    assert _takes(unbounded, "n" + "q" * 300) and not _takes(unbounded, "name")


def test_an_any_of_branch_s_free_names_exclude_its_declared_ones() -> None:
    """Free names exclude the declared names of every top-level branch together (a branch's own included)."""
    branch = {"type": "object", "required": ["a"], "additionalProperties": True}
    schema = {"anyOf": [{**branch, "properties": {"a": {"type": "integer"}}}, {**branch, "required": ["b"],
              "properties": {"b": {"type": "integer"}}}]}  # fmt: skip
    assert _arguments("glm_xml", schema, ("a", "1"), ("c", "x"))
    assert not _arguments("glm_xml", schema, ("a", "1"), ("a", "x"))
    assert not _arguments("glm_xml", schema, ("b", "1"), ("b", "x"))
