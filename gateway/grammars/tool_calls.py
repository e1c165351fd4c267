"""Structural tags for tag-shaped tool calls (one `tag` per tool), shared by the families that write them.

Policy: tool_choice "auto" makes calls lazy (free text; a call starts at the family's trigger), "required"
or a named tool makes the answer calls only, a named tool or `parallel_tool_calls=false` one call.
Arguments follow the tool's schema unless the tool says `strict: false` (seed 001: an omitted `strict` is
strict); then any object. response_format is the answer's JSON (with "auto", the answer is either calls
or that JSON); a prompt that opened the think block gets its reasoning block first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from backends.base import Grammar
from gateway.grammars.json import ANY_OBJECT, RESPONSE_SCHEMA_PARAM, compact_json_format, compact_json_grammar
from gateway.grammars.json import response_schema as answer_schema
from gateway.grammars.reasoning import with_reasoning
from gateway.types import ChatRequest

Format = dict[str, Any]


def arguments_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """The schema a call's arguments must follow: the declared one unless the tool says `strict: false`."""
    fn = tool["function"]
    if fn.get("strict") is False or not isinstance(fn.get("parameters"), dict):
        return ANY_OBJECT
    return fn["parameters"]


@dataclass(frozen=True)
class CallFormat:
    """How one family writes calls: the tag of a tool's call, what starts any call, and the think block."""

    tag: Callable[[dict[str, Any]], Format]
    trigger: str
    think: tuple[str, str]
    separator: str = "\n"


def build_grammar(request: ChatRequest, prompt_opens_reasoning: bool, calls_format: CallFormat) -> Grammar | None:
    """The grammar for `request`; `prompt_opens_reasoning` says the prompt ends inside the think block."""
    schema = answer_schema(request.response_format)
    answer = compact_json_format(schema, RESPONSE_SCHEMA_PARAM) if schema is not None else None
    forced = request.tool_choice != "auto"
    think = calls_format.think
    if request.active_tools:
        one = isinstance(request.tool_choice, dict) or not request.parallel_tool_calls
        calls = _calls(request, calls_format, only_calls=forced or answer is not None, one=one)
        if answer is not None and not forced:
            calls = {"type": "or", "elements": [calls, answer]}
        optional = forced or answer is not None
        return with_reasoning(calls, prompt_opens_reasoning=prompt_opens_reasoning, reasoning_optional=optional,
                              think=think)  # fmt: skip
    if answer is None:
        return None
    if prompt_opens_reasoning:
        return with_reasoning(answer, prompt_opens_reasoning=True, reasoning_optional=False, think=think)
    return compact_json_grammar(schema, RESPONSE_SCHEMA_PARAM)


def _calls(request: ChatRequest, calls_format: CallFormat, only_calls: bool, one: bool) -> Format:
    tags = [calls_format.tag(t) for t in request.active_tools]
    if only_calls:
        return {"type": "tags_with_separator", "tags": tags, "separator": calls_format.separator,
                "at_least_one": True, "stop_after_first": one}  # fmt: skip
    return {"type": "triggered_tags", "triggers": [calls_format.trigger], "tags": tags, "at_least_one": False,
            "stop_after_first": one}  # fmt: skip
