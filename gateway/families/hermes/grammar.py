"""Output grammars for the hermes family, as xgrammar structural tags.

Only formats that xgrammar 0.2.7 (pinned by SGLang) already has are used:
`tag`, `triggered_tags` (lazy calls), `tags_with_separator` (forced calls: nothing but calls),
`grammar` (EBNF), `any_text`, `sequence`, `or` and `optional`. JSON is compact
(one line, ", " and ": "; gateway/grammars/json.py), so a weak model cannot fill
its budget with whitespace inside arguments.

Policy:
* tools active, tool_choice "auto": calls are lazy (free text, a call starts
  at `<tool_call>`); "required" or a named tool: the answer is calls only
  (after an optional reasoning block); a named tool or `parallel_tool_calls=false`:
  one call.
* response_format json_object / json_schema: the answer is that JSON.
* both, with tool_choice "auto": the answer is EITHER tool calls OR the JSON
  answer (the format describes the final answer; calls come before it).
  With "required" / named, calls win and response_format waits for a later turn.
* a prompt that opened `<think>` gets a reasoning block up to `</think>` first,
  so constraints apply to the answer, never to the reasoning.
"""

from __future__ import annotations

import json
from typing import Any

from backends.base import Grammar
from gateway.families.chatml import THINK_END, THINK_START, TOOL_CALL_END, TOOL_CALL_START
from gateway.grammars.json import (
    ANY_OBJECT,
    RESPONSE_SCHEMA_PARAM,
    compact_json_format,
    compact_json_grammar,
    response_schema,
)
from gateway.grammars.reasoning import with_reasoning
from gateway.types import ChatRequest

Format = dict[str, Any]
THINK = (THINK_START, f"{THINK_END}\n\n")


def call_tag(tool: dict[str, Any], param: str) -> Format:
    """The tag of one call: the exact Qwen layout with the tool's name, arguments by its schema."""
    fn = tool["function"]
    name = json.dumps(fn["name"], ensure_ascii=False)
    return {
        "type": "tag",
        "begin": f'{TOOL_CALL_START}\n{{"name": {name}, "arguments": ',
        "content": compact_json_format(fn.get("parameters") or ANY_OBJECT, param),
        "end": f"}}\n{TOOL_CALL_END}",
    }


def build_grammar(request: ChatRequest, prompt_opens_reasoning: bool) -> Grammar | None:
    """The grammar for `request`; `prompt_opens_reasoning` says the prompt ends inside `<think>`."""
    tools = request.active_tools
    schema = response_schema(request.response_format)
    if schema is not None:
        answer = compact_json_format(schema, RESPONSE_SCHEMA_PARAM)
    forced = request.tool_choice != "auto"
    if tools:
        named = isinstance(request.tool_choice, dict)  # one call of that tool, as vLLM and SGLang do
        calls = _calls(request, only_calls=forced or schema is not None, one=named or not request.parallel_tool_calls)
        if schema is not None and not forced:
            calls = {"type": "or", "elements": [calls, answer]}
        return with_reasoning(
            calls,
            prompt_opens_reasoning=prompt_opens_reasoning,
            reasoning_optional=forced or schema is not None,
            think=THINK,
        )
    if schema is None:
        return None
    if prompt_opens_reasoning:
        return with_reasoning(answer, prompt_opens_reasoning=True, reasoning_optional=False, think=THINK)
    return compact_json_grammar(schema, RESPONSE_SCHEMA_PARAM)


def _calls(request: ChatRequest, only_calls: bool, one: bool) -> Format:
    """Calls of the active tools: `only_calls` — the answer is one or more calls and nothing else
    (newline-separated); otherwise free text in which a call may start at `<tool_call>`."""
    active = {t["function"]["name"] for t in request.active_tools}
    tags = [
        call_tag(t, f"tools[{i}].function.parameters")
        for i, t in enumerate(request.tools)
        if t["function"]["name"] in active
    ]
    if only_calls:
        return {
            "type": "tags_with_separator",
            "tags": tags,
            "separator": "\n",
            "at_least_one": True,
            "stop_after_first": one,
        }
    return {
        "type": "triggered_tags",
        "triggers": [TOOL_CALL_START],
        "tags": tags,
        "at_least_one": False,
        "stop_after_first": one,
    }
