"""Output grammars for Llama 3 JSON calls, as xgrammar structural tags valid for xgrammar 0.2.7 / 0.2.8.

Policy:
* tool_choice "required" or a named tool: the answer is calls only,
  `{"name": "NAME", "parameters": {…}}` with the tool's schema (any object
  when the tool says `strict: false`), separated by "; " (one call when
  named or `parallel_tool_calls` is false). Formats: tag, tags_with_separator,
  triggered_tags, grammar (EBNF for compact JSON).
* tool_choice "auto": free text in which every `{"name": ` opens a call
  (`triggered_tags`, as xgrammar 0.2.9's builtin `llama` style; one call when
  `parallel_tool_calls` is false). Llama 3 writes calls as bare JSON with no
  marker, so that spelling is the trigger: an answer written as JSON whose
  first key is "name" must be a call too (other JSON answers stay free), and
  a call the grammar takes mid-text is a call to the parser too.
* response_format json_object / json_schema (without forced calls): the answer is that JSON.
* Llama 4's pythonic calls get no call grammar (only response_format).
* No JSON string can hold a control token's spelling (the vocabulary's
  special tokens, `<|reserved_special_token_…` by its prefix), so a backend
  whose xgrammar vocabulary spells control tokens as text (SGLang, vLLM)
  cannot put `<|eot_id|>` inside a value (`gateway.grammars.safe_json`); a
  schema with no such grammar is a 400 with `strict: true`, else any object.
"""

from __future__ import annotations

import json
from typing import Any

from backends.base import Grammar
from gateway.grammars.json import RESPONSE_SCHEMA_PARAM, response_schema, response_strict
from gateway.grammars.safe_json import control_spellings, safe_json_ebnf, safe_json_format
from gateway.grammars.tool_calls import arguments_schema
from gateway.types import ChatRequest

from .markers import CALL_TRIGGER


def call_tag(tool: dict[str, Any], param: str, spellings: tuple[str, ...]) -> dict[str, Any]:
    """One Llama 3 call of `tool`: its name, then arguments by its schema with none of `spellings` in a string."""
    fn = tool["function"]
    name = json.dumps(fn["name"], ensure_ascii=False)
    return {
        "type": "tag",
        "begin": f'{{"name": {name}, "parameters": ',
        "content": safe_json_format(arguments_schema(tool), spellings, param, fn.get("strict") is True),
        "end": "}",
    }


def build_grammar(request: ChatRequest, tokenizer: Any, json_calls: bool) -> Grammar | None:
    """The grammar for `request` on `tokenizer`; `json_calls`: the Llama 3 JSON call syntax (else Llama 4
    pythonic)."""
    tools = request.active_tools
    schema = response_schema(request.response_format)
    if tools and json_calls and (request.tool_choice != "auto" or schema is None):
        names = {t["function"]["name"] for t in tools}
        spellings = control_spellings(tokenizer)
        tags = [
            call_tag(t, f"tools[{i}].function.parameters", spellings)
            for i, t in enumerate(request.tools)
            if t["function"]["name"] in names
        ]
        if request.tool_choice == "auto":
            calls = {"type": "triggered_tags", "triggers": [CALL_TRIGGER], "tags": tags, "at_least_one": False}
            calls["stop_after_first"] = not request.parallel_tool_calls
        else:
            calls = {"type": "tags_with_separator", "tags": tags, "separator": "; ", "at_least_one": True}
            calls["stop_after_first"] = isinstance(request.tool_choice, dict) or not request.parallel_tool_calls
        return Grammar("structural_tag", json.dumps({"type": "structural_tag", "format": calls}, ensure_ascii=False))
    if schema is None or (tools and request.tool_choice != "auto"):
        return None
    strict = response_strict(request.response_format)
    return Grammar("ebnf", safe_json_ebnf(schema, control_spellings(tokenizer), RESPONSE_SCHEMA_PARAM, strict))
