"""Output grammars for Qwen XML calls: xgrammar structural tags with its own `qwen_xml` argument style.

Each call is the layout of xgrammar's built-in Qwen3-Coder / Qwen3.5 tag (`<tool_call>\\n<function=NAME>\\n`
… `\\n</function>\\n</tool_call>`); only formats xgrammar 0.2.7 (SGLang's pin) and 0.2.8 (vLLM's) know.
The policy (lazy / forced calls, strict arguments, response_format, reasoning) is
`gateway.grammars.tool_calls`'.
"""

from __future__ import annotations

from typing import Any

from backends.base import Grammar
from gateway.families.chatml import THINK_END, THINK_START, TOOL_CALL_END, TOOL_CALL_START
from gateway.grammars.tool_calls import CallFormat, arguments_schema
from gateway.grammars.tool_calls import build_grammar as build_calls_grammar
from gateway.types import ChatRequest

from .markers import FUNCTION_CLOSE, FUNCTION_OPEN

CALL_TRIGGER = f"{TOOL_CALL_START}\n{FUNCTION_OPEN}"


def call_tag(tool: dict[str, Any]) -> dict[str, Any]:
    """One call of `tool`: its name in the header, its arguments as `<parameter=K>` elements."""
    return {
        "type": "tag",
        "begin": f"{CALL_TRIGGER}{tool['function']['name']}>\n",
        "content": {"type": "json_schema", "json_schema": arguments_schema(tool), "style": "qwen_xml"},
        "end": f"\n{FUNCTION_CLOSE}\n{TOOL_CALL_END}",
    }


CALLS = CallFormat(tag=call_tag, trigger=CALL_TRIGGER, think=(THINK_START, f"{THINK_END}\n\n"))


def build_grammar(request: ChatRequest, prompt_opens_reasoning: bool) -> Grammar | None:
    """The grammar for `request`; `prompt_opens_reasoning` says the prompt ends inside `<think>`."""
    return build_calls_grammar(request, prompt_opens_reasoning, CALLS)
