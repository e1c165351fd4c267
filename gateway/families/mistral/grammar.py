"""Output grammars for Mistral v11+ calls, as xgrammar structural tags valid for xgrammar 0.2.7 / 0.2.8.

`[TOOL_CALLS]`, `[ARGS]`, `[THINK]` and `[/THINK]` are `token` formats by
integer id (vLLM validates tags without a tokenizer and accepts only ids);
free text is `any_tokens` excluding them. Formats used: sequence, or,
optional, star, plus, const_string, token, any_tokens, grammar (EBNF for compact JSON).

Policy:
* An optional `[THINK]…[/THINK]` block, then the answer.
* tools, tool_choice "auto": text, then any number of calls
  `[TOOL_CALLS]NAME[ARGS]{…}` (one when `parallel_tool_calls` is false);
  "required" / named: at least one call and no text; named: only that tool.
  Arguments follow the tool's schema unless it says `strict: false`.
* response_format json_object / json_schema: the answer is that JSON; with tools and
  "auto", EITHER calls OR that JSON (no free text).
* The v3 JSON-array format (Mistral 7B v0.3) gets no call grammar.
* No JSON string can hold a control token's spelling (the vocabulary's
  special tokens: `[TOOL_CALLS]`, `</s>`, … each by its first 5 characters,
  `[TOOL`, `<SPEC`; a literal, as an enum value, only whole), so a
  backend whose xgrammar vocabulary spells control tokens as text (SGLang,
  vLLM) cannot put `[ARGS]` inside a value (`gateway.grammars.safe_json`;
  length-bounded strings take `<` and `[` only escaped); a schema with no such
  grammar is a 400 with `strict: true`, else any object.
"""

from __future__ import annotations

import json
from typing import Any

from backends.base import Grammar
from gateway.grammars.json import RESPONSE_SCHEMA_PARAM, response_schema, response_strict
from gateway.grammars.safe_json import added_spellings, prefixes, safe_json_format
from gateway.grammars.tool_calls import arguments_schema
from gateway.types import ChatRequest

from .markers import ARGS, THINK, THINK_END, TOOL_CALLS

Format = dict[str, Any]
CONTROL = (TOOL_CALLS, ARGS, THINK, THINK_END)


def build_grammar(request: ChatRequest, tokenizer: Any) -> Grammar | None:
    """The grammar for `request` on a v11+ tekken vocabulary, or None when nothing constrains the output."""
    tools = request.active_tools
    schema = response_schema(request.response_format)
    if not tools and schema is None:
        return None
    ids = {t: tokenizer.token_to_id(t) for t in CONTROL}
    if None in ids.values():
        return None  # a vocabulary without [ARGS] (v3) writes JSON arrays: no call grammar
    token = lambda t: {"type": "token", "token": ids[t]}
    text: Format = {"type": "any_tokens", "exclude_tokens": sorted(ids.values())}
    spellings = added_spellings(tokenizer)
    thinking = {"type": "optional", "content": {"type": "sequence", "elements": [token(THINK), text, token(THINK_END)]}}
    strict = response_strict(request.response_format)
    json_answer = None if schema is None else _safe_json(schema, spellings, RESPONSE_SCHEMA_PARAM, strict)
    if tools:
        names = {t["function"]["name"] for t in tools}
        calls = [
            _call(t, f"tools[{i}].function.parameters", token, spellings)
            for i, t in enumerate(request.tools)
            if t["function"]["name"] in names
        ]
        call = calls[0] if len(calls) == 1 else {"type": "or", "elements": calls}
        auto = request.tool_choice == "auto"
        one = isinstance(request.tool_choice, dict) or not request.parallel_tool_calls
        if auto and json_answer is not None:  # either calls or the JSON answer, no free text
            answer = [{"type": "or", "elements": [call if one else {"type": "plus", "content": call}, json_answer]}]
        elif one:
            answer = [text, {"type": "optional", "content": call}] if auto else [call]
        else:
            answer = [text, {"type": "star", "content": call}] if auto else [{"type": "plus", "content": call}]
    else:
        answer = [json_answer]
    fmt = {"type": "sequence", "elements": [thinking, *answer]}
    return Grammar("structural_tag", json.dumps({"type": "structural_tag", "format": fmt}, ensure_ascii=False))


def _call(tool: dict[str, Any], param: str, token: Any, spellings: tuple[str, ...]) -> Format:
    fn = tool["function"]
    arguments = _safe_json(arguments_schema(tool), spellings, param, fn.get("strict") is True)
    parts = [token(TOOL_CALLS), {"type": "const_string", "value": fn["name"]}, token(ARGS)]
    return {"type": "sequence", "elements": [*parts, arguments]}


def _safe_json(schema: Any, spellings: tuple[str, ...], param: str, strict: bool) -> Format:
    """`safe_json_format` with the spellings' `prefixes` out of strings and a literal refused only where it holds a
    whole spelling (`"[TOOL"` is a fine enum value; `"[TOOL_CALLS]"` is not)."""
    return safe_json_format(schema, spellings, param, strict, in_strings=prefixes(spellings))
