"""Output grammars for GLM calls: xgrammar structural tags with its own `glm_xml` argument style.

A call is `<tool_call>NAME` + `<arg_key>K</arg_key><arg_value>V</arg_value>`… + `</tool_call>` (xgrammar's
built-in GLM-4.7 / 5 tag; the GLM-4.5 layout adds newlines, accepted by the same parser). Only formats
xgrammar 0.2.7 and 0.2.8 know; the policy is `gateway.grammars.tool_calls`'.
"""

from __future__ import annotations

from typing import Any

from backends.base import Grammar
from gateway.grammars.tool_calls import CallFormat, arguments_schema
from gateway.grammars.tool_calls import build_grammar as build_calls_grammar
from gateway.types import ChatRequest

from .markers import THINK_END, THINK_START, TOOL_CALL_END, TOOL_CALL_START


def call_tag(tool: dict[str, Any], newline: str = "") -> dict[str, Any]:
    """One call of `tool`: `<tool_call>NAME`, its arguments as key/value tag pairs, `</tool_call>`."""
    return {
        "type": "tag",
        "begin": f"{TOOL_CALL_START}{tool['function']['name']}{newline}",
        "content": {"type": "json_schema", "json_schema": arguments_schema(tool), "style": "glm_xml"},
        "end": TOOL_CALL_END,
    }


CALLS = CallFormat(tag=call_tag, trigger=TOOL_CALL_START, think=(THINK_START, THINK_END), separator="")


def build_grammar(request: ChatRequest, prompt_opens_reasoning: bool) -> Grammar | None:
    """The grammar for `request`; `prompt_opens_reasoning` says the prompt ends inside `<think>`."""
    return build_calls_grammar(request, prompt_opens_reasoning, CALLS)
