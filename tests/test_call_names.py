"""No family reports a call without a name: clients dispatch on it (`gateway.families.calls.is_call_name`).

Each output is replayed through the family's parser on its tokenizer (the corpus harness, `tests/test_parser_corpus.py`)
whole, one token at a time and in seeded random chunkings. Where the parser reads a call from text and has a
"no call" reading for it (hermes, llama3_json, qwen3_xml) the nameless call is content, as any other body that is no
call; where calls are read from marker tokens (GLM, DSML, token sections, Mistral's arrays) it is dropped, as those
parsers drop any other malformed call, never markup in content.
"""

from __future__ import annotations

from typing import Any

import pytest

from backends.detokenizer import Detokenizer
from tests.family_checks import added_tokens, feed
from tests.test_parser_corpus import FAMILIES, chunkings, new_parser, parse, tokenizer

HERMES_BODY = '\n{"name": "", "arguments": {"a": "x"}}\n'
DSML_INVOKE = (
    '<｜DSML｜invoke name="">\n<｜DSML｜parameter name="a" string="true">x</｜DSML｜parameter>\n</｜DSML｜invoke>'
)
CASES = [  # (family, output, the content a client gets: no call in any of them)
    ("hermes", f"Hi <tool_call>{HERMES_BODY}</tool_call>", f"Hi <tool_call>{HERMES_BODY}</tool_call>"),
    ("hermes", '<tool_call>\n{"arguments": {}, "name": " "}\n</tool_call>',
     '<tool_call>\n{"arguments": {}, "name": " "}\n</tool_call>'),
    ("llama3_json", '{"name": "", "parameters": {}}', '{"name": "", "parameters": {}}'),
    ("qwen3_xml", "Hi <tool_call>\n<function=>\n</function>\n</tool_call>", "Hi \n<function=>\n</function>"),
    ("glm45", "Hi <tool_call><arg_key>a</arg_key><arg_value>x</arg_value></tool_call>", "Hi"),
    ("glm47", "Hi <tool_call> </tool_call>", "Hi"),
    ("deepseek_v32", f"Hi <｜DSML｜function_calls>\n{DSML_INVOKE}\n</｜DSML｜function_calls>", "Hi"),
    ("deepseek_v4", 'Hi <｜DSML｜tool_calls>\n<｜DSML｜invoke name="">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>', "Hi"),
    ("kimi_k2", ("Hi <|tool_calls_section_begin|><|tool_call_begin|>functions.:0<|tool_call_argument_begin|>{}"
                 "<|tool_call_end|><|tool_calls_section_end|>"), "Hi"),
    ("mistral_v3", '[TOOL_CALLS][{"name": "", "arguments": {}}]', ""),
]  # fmt: skip


@pytest.mark.parametrize(("family", "output", "content"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_call_without_a_name_is_no_call_however_chunked(family: str, output: str, content: str) -> None:
    case: dict[str, Any] = {"id": output, "output": output, "tools": {"f": {"a": {"type": "string"}}}}
    n = len(tokenizer(FAMILIES[family][1]).encode(output, add_special_tokens=False).ids)
    for cuts in chunkings(output, n):
        assert parse(case, family, cuts) == {"content": content, "reasoning": "", "calls": []}, cuts


@pytest.mark.parametrize("family", ["glm45", "deepseek_v32"])
def test_a_nameless_call_takes_no_index(family: str) -> None:
    """The call after a dropped nameless one is the first the client gets: index 0."""
    nameless, named = {
        "glm45": ("<tool_call> </tool_call>", "<tool_call>f<arg_key>a</arg_key><arg_value>x</arg_value></tool_call>"),
        "deepseek_v32": (DSML_INVOKE, DSML_INVOKE.replace('name=""', 'name="f"')),
    }[family]
    if family == "deepseek_v32":
        nameless, named = "<｜DSML｜function_calls>\n" + nameless, named + "\n</｜DSML｜function_calls>"
    tok = tokenizer(FAMILIES[family][1])
    ids = tok.encode(nameless + "\n" + named, add_special_tokens=False).ids
    deltas = feed(
        new_parser({"tools": {"f": {"a": {"type": "string"}}}}, family), Detokenizer(tok, added_tokens(tok)), ids
    )
    assert {d.tool_index for d in deltas if d.tool_index is not None} == {0}
    assert [d.tool_name for d in deltas if d.tool_name] == ["f"]
