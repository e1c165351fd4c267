"""Output grammars for GLM calls: xgrammar structural tags with its own `glm_xml` argument style.

A call is `<tool_call>NAME` + `<arg_key>K</arg_key><arg_value>V</arg_value>`… + `</tool_call>` (xgrammar's
built-in GLM-4.7 / 5 tag; the GLM-4.5 layout adds newlines, accepted by the same parser). `<tool_call>`,
`</tool_call>`, `<think>` and `</think>` are their token ids where the vocabulary has them (every GLM one); the
`glm_xml` style writes `<arg_key>` / `<arg_value>` as text, so inside the arguments their ordinary-token spelling
still passes the grammar. The policy is `gateway.grammars.tool_calls`'.
"""

from __future__ import annotations

from typing import Any

from gateway.grammars.reasoning import ThinkBlock
from gateway.grammars.tool_calls import CallBody, CallFormat, arguments_schema

from .markers import THINK_END, THINK_START, TOOL_CALL_END, TOOL_CALL_START


def call_body(tool: dict[str, Any], param: str) -> CallBody:
    """One call of `tool` between the markers: its name, then its arguments as key/value tag pairs."""
    arguments = {"type": "json_schema", "json_schema": arguments_schema(tool), "style": "glm_xml"}
    return CallBody(tool["function"]["name"], arguments, "")


CALLS = CallFormat(
    TOOL_CALL_START, TOOL_CALL_END, call_body, TOOL_CALL_START, ThinkBlock(THINK_START, THINK_END), separator=""
)
