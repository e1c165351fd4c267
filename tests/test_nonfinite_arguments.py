"""No family sends a call's arguments holding NaN or Infinity: numbers past a double (`1e999`), which Python reads as
inf and would write back as `Infinity`, and the NaN / Infinity literals are no JSON a client can parse. A typed value
keeps its text as a string (as SGLang's test_nonfinite_coercion.py asks of its coercions, after vLLM#43984), and so
does a whole JSON body holding one (`values.json_keeping_text`), in every family, as hermes' streamed arguments keep
it: the same call streamed or not, and arguments a client can parse."""

from __future__ import annotations

from typing import Any

import pytest

from backends.detokenizer import Detokenizer
from gateway.families.values import convert, strict_json
from tests.family_checks import added_tokens, feed, joined_calls
from tests.test_parser_corpus import FAMILIES, chunkings, new_parser, parse, tokenizer

NUMBER = {"f": {"p": {"type": "number"}}}
DSML = '<｜DSML｜function_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="p" string="false">{}</｜DSML｜parameter>'
K2 = "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>"
V31 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
OUTPUTS = [
    ("qwen3_xml", "<tool_call>\n<function=f>\n<parameter=p>\n1e999\n</parameter>\n</function>\n</tool_call>"),
    ("glm47", "<tool_call>f<arg_key>p</arg_key><arg_value>-1e999</arg_value></tool_call>"),
    ("deepseek_v32", DSML.format("1e999") + "\n</｜DSML｜invoke>\n</｜DSML｜function_calls>"),
    ("gemma4", "<|tool_call>call:f{p:1e999}<tool_call|>"),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": "{\\"p\\": 1e999}"}\n</tool_call>'),
    ("llama3_json", '{"name": "f", "parameters": {"p": 1e999}}'),
    ("llama4_pythonic", "[f(p=1e999)]"),
    ("kimi_k2", K2.format('{"p": NaN}') + "<|tool_calls_section_end|>"),
    ("deepseek_v31", V31.format('{"p": 1e999}')),
    ("mistral_v3", '[TOOL_CALLS][{"name": "f", "arguments": {"p": 1e999}}]'),
    ("mistral", '[TOOL_CALLS]f[ARGS]{"p": 1e999}'),
    ("gpt_oss", '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"p": 1e999}<|call|>'),
]


@pytest.mark.parametrize(("family", "output"), OUTPUTS, ids=[family for family, _ in OUTPUTS])
def test_no_call_holds_a_number_json_cannot_take_back(family: str, output: str) -> None:
    tok = tokenizer(FAMILIES[family][1])
    parser = new_parser({"id": family, "tools": NUMBER}, family)
    deltas = feed(parser, Detokenizer(tok, added_tokens(tok)), tok.encode(output, add_special_tokens=False).ids)
    calls = joined_calls(deltas)
    # a JSON body or a typed value keeps the call; a Python literal call list drops a call whose value writes as no
    # JSON (`llama.pythonic_calls`, as vLLM's parser drops it)
    assert [name for name, _ in calls] == ([] if family == "llama4_pythonic" else ["f"])
    for _, arguments in calls:  # strict JSON, the value kept as its text
        assert isinstance(strict_json(arguments)["p"], str), arguments


def test_an_integer_past_the_digit_limit_stays_text() -> None:
    """Python refuses to read (or write) an integer of more than 4,300 digits: the value stays its text, no crash."""
    digits = "7" * 5000
    assert convert(digits, frozenset({"integer"})) == digits
    assert convert(digits, frozenset({"number"})) == digits


STREAMED_HERMES = [  # (output, expected arguments): read whole or however chunked
    # other body layouts are read whole at </tool_call> (`parse_whole_call`): the word kept as its text there too
    ('<tool_call>{"arguments": {"p": NaN}, "name": "f"}</tool_call>', {"p": "NaN"}),
    ('<tool_call>{"name": "f", "arguments": "{\\"p\\": -1e999}"}</tool_call>', {"p": "-1e999"}),
    ('<tool_call>{"name":"f","arguments":{"p": NaN}}</tool_call>', {"p": "NaN"}),
    ('<tool_call>\n{"name": "f", "arguments": {"p": 1e999, "q": 2}}\n</tool_call>', {"p": "1e999", "q": 2}),
    ('<tool_call>{"name":"f","arguments":{"q": {"p": [Infinity]}}}</tool_call>', {"q": {"p": ["Infinity"]}}),
    ('<tool_call>{"name":"f","arguments":{"q": 1, "p": -Infinity}}</tool_call>', {"q": 1, "p": "-Infinity"}),
    # an integer past a double's range is still JSON's (an int), streamed as read whole: not made a string
    ('<tool_call>{"name":"f","arguments":{"q": 1, "p": ' + "9" * 400 + "}}</tool_call>", {"q": 1, "p": int("9" * 400)}),
]


@pytest.mark.parametrize(("output", "arguments"), STREAMED_HERMES)
def test_hermes_streamed_arguments_agree_with_the_whole_body_however_chunked(output: str, arguments: Any) -> None:
    """A non-finite number goes as a JSON string, its text, wherever it stands in the arguments (before the call is
    released at its first argument or after) and however the output is chunked, as the whole body keeps it."""
    case = {"id": output, "output": output, "tools": NUMBER}
    n = len(tokenizer("qwen").encode(output, add_special_tokens=False).ids)
    for cuts in chunkings(output, n):
        assert parse(case, "hermes", cuts) == {"content": "", "reasoning": "", "calls": [["f", arguments]]}, cuts


@pytest.mark.parametrize(("family", "output"), OUTPUTS, ids=[family for family, _ in OUTPUTS])
def test_arguments_nested_past_the_parsers_recursion_are_no_crash(family: str, output: str) -> None:
    """A model writing `[[[…]]]` 3,000 deep where a value goes: JSON's parser raised RecursionError out of the
    family's parser (a 500, or a broken stream); the value is no JSON now, read by each family's rule for that."""
    deep = "[" * 3000 + "]" * 3000
    tok = tokenizer(FAMILIES[family][1])
    parser = new_parser({"id": family, "tools": {"f": {"p": {"type": "array"}}}}, family)
    text = output.replace("-1e999", deep).replace("1e999", deep).replace("NaN", deep)
    feed(parser, Detokenizer(tok, added_tokens(tok)), tok.encode(text, add_special_tokens=False).ids)


def test_json_nested_past_the_recursion_limit_is_no_json() -> None:
    with pytest.raises(ValueError):
        strict_json("[" * 3000 + "]" * 3000)
