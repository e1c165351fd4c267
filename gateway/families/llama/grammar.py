"""Output grammars for Llama 3 JSON calls, as xgrammar structural tags valid for xgrammar 0.2.7 / 0.2.8.

Policy:
* tool_choice "required" or a named tool: the answer is calls only,
  `{"name": "NAME", "parameters": {…}}` with the tool's schema (any object
  when the tool says `strict: false`), separated by "; " (one call when
  named or `parallel_tool_calls` is false). Formats: tag, tags_with_separator,
  grammar (EBNF for compact JSON).
* tool_choice "auto": no grammar. Llama 3 writes calls as bare JSON with no
  marker that opens them, so a lazy call grammar would also constrain every
  answer that starts with `{`.
* response_format json_object / json_schema (without forced calls): the answer is that JSON.
* Llama 4's pythonic calls get no call grammar (only response_format).
* Known gap: JSON strings are xgrammar text, which backends match against a
  control token's spelling (`<|eot_id|>` inside a value); the spelling-safe
  JSON of the section families would close it once shared.
"""

from __future__ import annotations

import json
from typing import Any

from backends.base import Grammar
from gateway.grammars.json import (
    RESPONSE_SCHEMA_PARAM,
    compact_json_format,
    compact_json_grammar,
    response_schema,
)
from gateway.grammars.tool_calls import arguments_schema
from gateway.types import ChatRequest


def call_tag(tool: dict[str, Any], param: str) -> dict[str, Any]:
    """One Llama 3 call of `tool`: its name, then arguments by its schema."""
    fn = tool["function"]
    schema = arguments_schema(tool)
    name = json.dumps(fn["name"], ensure_ascii=False)
    return {
        "type": "tag",
        "begin": f'{{"name": {name}, "parameters": ',
        "content": compact_json_format(schema, param),
        "end": "}",
    }


def build_grammar(request: ChatRequest, json_calls: bool) -> Grammar | None:
    """The grammar for `request`; `json_calls`: the Llama 3 JSON call syntax (else Llama 4 pythonic)."""
    tools = request.active_tools
    if tools and request.tool_choice != "auto" and json_calls:
        names = {t["function"]["name"] for t in tools}
        tags = [
            call_tag(t, f"tools[{i}].function.parameters")
            for i, t in enumerate(request.tools)
            if t["function"]["name"] in names
        ]
        one = isinstance(request.tool_choice, dict) or not request.parallel_tool_calls
        calls = {"type": "tags_with_separator", "tags": tags, "separator": "; ", "at_least_one": True}
        calls["stop_after_first"] = one
        return Grammar("structural_tag", json.dumps({"type": "structural_tag", "format": calls}, ensure_ascii=False))
    schema = response_schema(request.response_format)
    if schema is None or (tools and request.tool_choice != "auto"):
        return None
    return compact_json_grammar(schema, RESPONSE_SCHEMA_PARAM)
