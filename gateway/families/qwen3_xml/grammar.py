"""Output grammars for Qwen XML calls, as xgrammar structural tags (xgrammar's own `qwen_xml` argument style).

Only what xgrammar 0.2.7 (SGLang's pin) and 0.2.8 (vLLM's) know: `tag`, `triggered_tags`,
`tags_with_separator`, `json_schema` with `style: "qwen_xml"`, `any_text`, `sequence`, `or`, `optional`.
Each call is the layout of xgrammar's built-in Qwen3-Coder / Qwen3.5 tag
(`<tool_call>\\n<function=NAME>\\n` … `\\n</function>\\n</tool_call>`).

Policy (as the hermes family's): tool_choice "auto" makes calls lazy (free text; a call starts at
`<tool_call>\\n<function=`), "required" or a named tool makes the answer calls only, a named tool or
`parallel_tool_calls=false` one call. Arguments follow the tool's schema unless the tool says
`strict: false` (seed 001: an omitted `strict` is strict); then any object. response_format is the answer's
JSON; a prompt that opened `<think>` gets its reasoning block first.
"""

from __future__ import annotations

from typing import Any

from backends.base import Grammar
from gateway.grammars.json import ANY_OBJECT, RESPONSE_SCHEMA_PARAM, compact_json_format, compact_json_grammar
from gateway.grammars.json import response_schema as answer_schema
from gateway.grammars.reasoning import with_reasoning
from gateway.types import ChatRequest

from .markers import FUNCTION_CLOSE, FUNCTION_OPEN, THINK_END, THINK_START, TOOL_CALL_END, TOOL_CALL_START

Format = dict[str, Any]
THINK = (THINK_START, THINK_END)
CALL_TRIGGER = f"{TOOL_CALL_START}\n{FUNCTION_OPEN}"


def arguments_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """The schema a call's arguments must follow: the declared one unless the tool says `strict: false`."""
    fn = tool["function"]
    if fn.get("strict") is False or not isinstance(fn.get("parameters"), dict):
        return ANY_OBJECT
    return fn["parameters"]


def call_tag(tool: dict[str, Any]) -> Format:
    """One call of `tool`: its name in the header, its arguments as `<parameter=K>` elements."""
    return {
        "type": "tag",
        "begin": f"{CALL_TRIGGER}{tool['function']['name']}>\n",
        "content": {"type": "json_schema", "json_schema": arguments_schema(tool), "style": "qwen_xml"},
        "end": f"\n{FUNCTION_CLOSE}\n{TOOL_CALL_END}",
    }


def build_grammar(request: ChatRequest, prompt_opens_reasoning: bool) -> Grammar | None:
    """The grammar for `request`; `prompt_opens_reasoning` says the prompt ends inside `<think>`."""
    schema = answer_schema(request.response_format)
    answer = compact_json_format(schema, RESPONSE_SCHEMA_PARAM) if schema is not None else None
    forced = request.tool_choice != "auto"
    if request.active_tools:
        one = isinstance(request.tool_choice, dict) or not request.parallel_tool_calls
        calls = _calls(request, only_calls=forced or answer is not None, one=one)
        if answer is not None and not forced:
            calls = {"type": "or", "elements": [calls, answer]}
        return with_reasoning(
            calls,
            prompt_opens_reasoning=prompt_opens_reasoning,
            reasoning_optional=forced or answer is not None,
            think=THINK,
        )
    if answer is None:
        return None
    if prompt_opens_reasoning:
        return with_reasoning(answer, prompt_opens_reasoning=True, reasoning_optional=False, think=THINK)
    return compact_json_grammar(schema, RESPONSE_SCHEMA_PARAM)


def _calls(request: ChatRequest, only_calls: bool, one: bool) -> Format:
    tags = [call_tag(t) for t in request.active_tools]
    if only_calls:
        return {"type": "tags_with_separator", "tags": tags, "separator": "\n", "at_least_one": True,
                "stop_after_first": one}  # fmt: skip
    return {"type": "triggered_tags", "triggers": [CALL_TRIGGER], "tags": tags, "at_least_one": False,
            "stop_after_first": one}  # fmt: skip
