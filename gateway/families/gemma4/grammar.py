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
* Arguments follow the tool's schema (unless it says `strict: false`) in
  Gemma's object notation, built from structural-tag formats (arguments.py):
  strings between two `<|"|>` TOKENS, so a string can neither be closed by the
  quote's spelling nor hold the quote token. xgrammar's own `gemma` style needs
  0.2.9 and, being text, would take the quote's spelling for the token. Local
  `$ref`s are inlined, free-form objects and values take any value three
  levels deep; a schema those formats still cannot spell out (a recursive or
  remote `$ref`, nesting past six levels) keeps free text inside `{…}` (no
  control token but `<|"|>`).
* response_format json_object / json_schema: the answer is that JSON, no
  control token's spelling in a string (`gateway.grammars.safe_json`).
"""

from __future__ import annotations

import json
from typing import Any

from backends.base import Grammar
from gateway.grammars.json import RESPONSE_SCHEMA_PARAM, response_schema, response_strict
from gateway.grammars.safe_json import control_spellings, safe_json_format
from gateway.grammars.tool_calls import arguments_schema
from gateway.types import ChatRequest

from .arguments import ArgumentFormats
from .markers import CALL_PREFIX, CHANNEL, CHANNEL_END, QUOTE, TOOL_CALL, TOOL_CALL_END

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
        strict = response_strict(request.response_format)
        answer = safe_json_format(schema, control_spellings(tokenizer), RESPONSE_SCHEMA_PARAM, strict)
        return _structural_tag(_seq(reasoning, answer))
    quote = tokenizer.token_to_id(QUOTE)
    values = None
    if quote is not None:
        raw = {"type": "any_tokens", "exclude_tokens": sorted({*ids.values(), quote})}
        values = ArgumentFormats({"type": "token", "token": quote}, raw)
    calls = [_call(t, token, text, values) for t in tools]
    call = calls[0] if len(calls) == 1 else {"type": "or", "elements": calls}
    auto = request.tool_choice == "auto"
    if isinstance(request.tool_choice, dict) or not request.parallel_tool_calls:
        answer = _seq(text, {"type": "optional", "content": call}, text) if auto else call
    else:
        answer = (
            _seq(text, {"type": "star", "content": _seq(call, text)}) if auto else {"type": "plus", "content": call}
        )
    return _structural_tag(_seq(reasoning, answer))


def _call(tool: dict[str, Any], token: Any, text: Format, values: ArgumentFormats | None) -> Format:
    """`<|tool_call>call:NAME{…}<tool_call|>`: arguments by the schema where it can be spelled out, else free text."""
    name = tool["function"]["name"]
    arguments = None if values is None else values.arguments(arguments_schema(tool))
    if arguments is None:
        return _seq(
            token(TOOL_CALL), {"type": "const_string", "value": f"{CALL_PREFIX}{name}{{"}, text, token(TOOL_CALL_END)
        )
    return _seq(
        token(TOOL_CALL), {"type": "const_string", "value": f"{CALL_PREFIX}{name}"}, arguments, token(TOOL_CALL_END)
    )


def _structural_tag(fmt: Format) -> Grammar:
    return Grammar("structural_tag", json.dumps({"type": "structural_tag", "format": fmt}, ensure_ascii=False))
