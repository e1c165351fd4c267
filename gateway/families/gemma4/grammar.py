"""Output grammars for Gemma 4, as xgrammar structural tags valid for xgrammar 0.2.7 / 0.2.8.

Control tokens are `token` formats by integer id; free text is `any_tokens`
excluding `<|tool_call>`, `<tool_call|>`, `<|channel>` and `<channel|>`.
Formats used: sequence, or, optional, star, plus, const_string, token,
any_tokens, grammar (EBNF for compact JSON).

Policy:
* An optional reasoning channel `<|channel>…<channel|>`, then the answer.
* tools, tool_choice "auto": text with any number of calls (one when
  `parallel_tool_calls` is false); "required" / named: calls only, at least
  one; named: only that tool. A call is `<|tool_call>call:NAME{…}<tool_call|>`
  with a declared NAME.
* response_format json_object / json_schema: the answer is that JSON.
* Known gap: the arguments inside `{…}` are free text (no control token but
  `<|"|>`): Gemma's object notation has no grammar in xgrammar before 0.2.9
  (`json_schema` style `gemma`), so argument schemas are not enforced.
"""

from __future__ import annotations

import json
from typing import Any

from backends.base import Grammar
from gateway.grammars.json import RESPONSE_SCHEMA_PARAM, compact_json_format, response_schema
from gateway.types import ChatRequest

from .markers import CALL_PREFIX, CHANNEL, CHANNEL_END, TOOL_CALL, TOOL_CALL_END

Format = dict[str, Any]


def _seq(*elements: Format) -> Format:
    return {"type": "sequence", "elements": list(elements)}


def build_grammar(request: ChatRequest, tokenizer: Any) -> Grammar | None:
    """The grammar for `request`, or None when nothing constrains the output (or the vocabulary lacks the tokens)."""
    tools = request.active_tools
    schema = response_schema(request.response_format)
    if not tools and schema is None:
        return None
    ids = {t: tokenizer.token_to_id(t) for t in (TOOL_CALL, TOOL_CALL_END, CHANNEL, CHANNEL_END)}
    if None in ids.values():
        return None
    token = lambda spelling: {"type": "token", "token": ids[spelling]}
    text: Format = {"type": "any_tokens", "exclude_tokens": sorted(ids.values())}
    reasoning = {"type": "optional", "content": _seq(token(CHANNEL), text, token(CHANNEL_END))}
    if not tools:
        return _structural_tag(_seq(reasoning, compact_json_format(schema, RESPONSE_SCHEMA_PARAM)))
    names = [t["function"]["name"] for t in tools]
    calls = [
        _seq(token(TOOL_CALL), {"type": "const_string", "value": f"{CALL_PREFIX}{n}{{"}, text, token(TOOL_CALL_END))
        for n in names
    ]
    call = calls[0] if len(calls) == 1 else {"type": "or", "elements": calls}
    auto = request.tool_choice == "auto"
    if isinstance(request.tool_choice, dict) or not request.parallel_tool_calls:
        answer = _seq(text, {"type": "optional", "content": call}, text) if auto else call
    else:
        answer = (
            _seq(text, {"type": "star", "content": _seq(call, text)}) if auto else {"type": "plus", "content": call}
        )
    return _structural_tag(_seq(reasoning, answer))


def _structural_tag(fmt: Format) -> Grammar:
    return Grammar("structural_tag", json.dumps({"type": "structural_tag", "format": fmt}, ensure_ascii=False))
