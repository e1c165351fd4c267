"""Client `pattern`s are bounded before any family builds or compiles a grammar from them (hermes and DeepSeek
pass them to xgrammar): a pattern that would take seconds to compile is a 400 naming its schema path."""

from __future__ import annotations

import pytest

from gateway.errors import APIError
from gateway.validation.chat import parse_chat_completion
from gateway.validation.schema_bounds import MAX_PATTERN_WEIGHT, pattern_weight

ACCEPTED = [r"^\d{3}-\d{4}$", r"^((\d{1,3})\.){3}\d{1,3}$", r"^[^@]+@[^@]+\.[a-z]{2,}$", r"^.{64}$", r"^(\w{4}){4}$"]
# Measured with the worker's xgrammar on the SmolLM2 vocabulary: gateway build (JSON schema → EBNF) or compile
# took 0.23–6.7 s for each of these.
REFUSED = [r"^a{5000}$", r"^.{1024}$", r"^(\w{16}){16}$", r"^(\w+){64}$", r"^(.{4}){4}$", r"^(.|.){128}", "a" * 600]


def tool_body(pattern: str) -> dict:
    parameters = {"type": "object", "properties": {"code": {"type": "string", "pattern": pattern}}}
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}],
    }


def schema_body(pattern: str) -> dict:
    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "string", "pattern": pattern}}},
    }
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
    }


@pytest.mark.parametrize("pattern", ACCEPTED)
def test_ordinary_patterns_pass(pattern):
    assert pattern_weight(pattern) <= MAX_PATTERN_WEIGHT
    parse_chat_completion(tool_body(pattern))
    parse_chat_completion(schema_body(pattern))


@pytest.mark.parametrize("pattern", REFUSED)
def test_costly_patterns_are_a_400_naming_the_schema_path(pattern):
    with pytest.raises(APIError) as tool_error:
        parse_chat_completion(tool_body(pattern))
    assert tool_error.value.status == 400 and tool_error.value.code == "pattern_too_complex"
    assert tool_error.value.param == "tools[0].function.parameters.properties.code.pattern"
    with pytest.raises(APIError) as schema_error:
        parse_chat_completion(schema_body(pattern))
    assert schema_error.value.param == "response_format.json_schema.schema.properties.items.items.pattern"


def test_a_pattern_must_be_a_string():
    with pytest.raises(APIError) as error:
        parse_chat_completion(tool_body(5))  # type: ignore[arg-type]
    assert error.value.param.endswith(".pattern")


NOTHING_TO_REPEAT = [r"^a{1}{2}$", "^a**$", "a+*", "a???", "a{1}??", "^*a", "(*a)", "a|*b", "a$*", "(?:b)?*", "{1}"]
"""ECMA-262 SyntaxErrors ("Nothing to repeat"; checked with node's `new RegExp(p, "u")`)."""
LAZY_OR_LITERAL = [r"^a*?$", "a??", r"a{1}?", r"a{2,}?", r"\**", "[*]+", "(?:a)*", "a+?b", r"[\]]+", "(|a)*"]


@pytest.mark.parametrize("pattern", NOTHING_TO_REPEAT)
def test_a_quantifier_with_nothing_to_repeat_is_a_400(pattern):
    """Found by probing: xgrammar read `^a{1}{2}$` as `^a{2}$`, and a strict answer `{"code": "aa"}` came back for
    a pattern no JSON Schema validator compiles."""
    with pytest.raises(APIError) as error:
        parse_chat_completion(tool_body(pattern))
    assert error.value.status == 400 and error.value.param == "tools[0].function.parameters.properties.code.pattern"


@pytest.mark.parametrize("pattern", LAZY_OR_LITERAL)
def test_a_lazy_or_literal_repeat_passes(pattern):
    parse_chat_completion(schema_body(pattern))
