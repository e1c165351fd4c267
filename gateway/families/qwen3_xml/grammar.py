"""Output grammars for Qwen XML calls: xgrammar structural tags, arguments in xgrammar's `qwen_xml` argument style.

Each call is the layout of xgrammar's built-in Qwen3-Coder / Qwen3.5 tag (`<tool_call>\\n<function=NAME>\\n`
… `\\n</function>\\n</tool_call>`). `<tool_call>`, `</tool_call>`, `<think>` and `</think>` are their token ids
where the vocabulary has them (every Qwen3 one); `<function=` and `<parameter=` are text in Qwen's vocabularies
and stay text. The arguments are the EBNF that the `qwen_xml` style builds, converted here so that no value can
hold a control token (`safe_json.xml_value_ebnf`: a raw value excludes the markers' and special tokens' whole
spellings, a JSON one their first characters unescaped); a schema xgrammar cannot convert is a 400 naming the
tool's parameters. The policy (lazy / forced calls, strict arguments, response_format, reasoning) is
`gateway.grammars.tool_calls`'.
"""

from __future__ import annotations

from typing import Any

from gateway.families.chatml_tokens import THINK_END, THINK_START, TOOL_CALL_END, TOOL_CALL_START
from gateway.grammars.reasoning import ThinkBlock
from gateway.grammars.tool_calls import CallBody, CallFormat, arguments_format

from .markers import FUNCTION_CLOSE, FUNCTION_OPEN


def call_body(tool: dict[str, Any], param: str, spellings: tuple[str, ...]) -> CallBody:
    """One call of `tool` between the markers: its name in the header, its arguments as `<parameter=K>` elements,
    no value spelling one of `spellings`."""
    arguments = arguments_format(tool, param, spellings, "qwen_xml")
    return CallBody(f"\n{FUNCTION_OPEN}{tool['function']['name']}>\n", arguments, f"\n{FUNCTION_CLOSE}\n")


CALLS = CallFormat(
    TOOL_CALL_START,
    TOOL_CALL_END,
    call_body,
    trigger=f"{TOOL_CALL_START}\n{FUNCTION_OPEN}",
    think=ThinkBlock(THINK_START, THINK_END, "\n\n"),
)
