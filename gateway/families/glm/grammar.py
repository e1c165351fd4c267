"""Output grammars for GLM calls: xgrammar structural tags, arguments in xgrammar's `glm_xml` argument style.

A call is `<tool_call>NAME` + `<arg_key>K</arg_key><arg_value>V</arg_value>`… + `</tool_call>` (xgrammar's
built-in GLM-4.7 / 5 tag; the GLM-4.5 layout adds newlines, accepted by the same parser). Every one of these
markers, and `<think>` / `</think>`, is its token id where the vocabulary has it (every GLM one): the arguments are
the EBNF that xgrammar's `glm_xml` style builds, converted here, with its marker literals made `Token(id)`s (EBNF
tokens, like the token formats, exist since xgrammar 0.2.0), so a marker spelled with ordinary tokens is never
structure, and no value can hold a control token (`safe_json.xml_value_ebnf`: a raw value excludes the markers'
and special tokens' whole spellings, a JSON one their first characters unescaped); a schema xgrammar cannot
convert is a 400 naming the tool's parameters. The policy is
`gateway.grammars.tool_calls`'.
"""

from __future__ import annotations

from typing import Any

from gateway.grammars.reasoning import ThinkBlock
from gateway.grammars.tool_calls import CallBody, CallFormat, arguments_format

from .markers import ARGUMENT_MARKERS, THINK_END, THINK_START, TOOL_CALL_END, TOOL_CALL_START


def call_body(tool: dict[str, Any], param: str, spellings: tuple[str, ...]) -> CallBody:
    """One call of `tool` between the markers: its name, then its arguments as key/value tag pairs, no value
    spelling one of `spellings`."""
    arguments = arguments_format(tool, param, spellings, "glm_xml")
    return CallBody(tool["function"]["name"], arguments, "")


CALLS = CallFormat(
    TOOL_CALL_START,
    TOOL_CALL_END,
    call_body,
    TOOL_CALL_START,
    ThinkBlock(THINK_START, THINK_END),
    separator="",
    inner=ARGUMENT_MARKERS,
)
