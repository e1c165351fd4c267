"""Output grammars for Gemma 4, as xgrammar structural tags valid for xgrammar 0.2.7 / 0.2.8.

Control tokens are `token` formats by integer id; free text is `any_tokens`
excluding every special added token of the vocabulary (`<|tool_call>`,
`<|channel>`, `<|"|>`, `<turn|>`, `<|tool_response>`…): structure comes only
where the grammar writes it, and a stop token only where the answer may end.
Formats used: sequence, or, optional, star, plus, const_string, token,
any_tokens, regex, grammar (EBNF for compact JSON).

Policy:
* An optional reasoning channel `<|channel>…<channel|>`, then the answer.
* tools, tool_choice "auto": text with any number of calls (one when
  `parallel_tool_calls` is false); "required" / named: calls only, at least
  one; named: only that tool. A call is `<|tool_call>call:NAME{…}<tool_call|>`
  with a declared NAME. An answer that may hold calls may end with
  `<|tool_response>` (a stop token: the model waits for the tool's answer),
  which appears nowhere else.
* Arguments follow the tool's schema (unless it says `strict: false`) in
  Gemma's object notation, built from structural-tag formats (arguments.py):
  strings between two `<|"|>` TOKENS, so a string can neither be closed by the
  quote's spelling nor hold the quote token. xgrammar's own `gemma` style needs
  0.2.9 and, being text, would take the quote's spelling for the token. Local
  `$ref`s are inlined, free-form objects and values take any value three
  levels deep; a schema those formats still cannot spell out (a recursive or
  remote `$ref`, nesting past six levels) takes any arguments in Gemma's
  notation (free text inside `{…}` took `call:f{x}`, which the parser reads as
  no call), and is a 400 when the tool says `strict: true`, as is a keyword the
  formats leave out (arguments.py).
* response_format json_object / json_schema: the answer is that JSON, no
  control token's spelling in a string (`gateway.grammars.safe_json`); with
  tools and "auto", either calls only or that JSON (never free text, which
  would not be the JSON asked for).
"""

from __future__ import annotations

import json
from typing import Any

from backends.base import Grammar
from gateway.grammars.json import RESPONSE_SCHEMA_PARAM, SchemaGrammarError, response_schema, response_strict
from gateway.grammars.safe_json import added_spellings, prefixes, safe_json_format, special_ids
from gateway.grammars.tool_calls import arguments_schema, indexed_active_tools
from gateway.types import ChatRequest

from .arguments import ArgumentFormats
from .markers import CALL_PREFIX, CHANNEL, CHANNEL_END, QUOTE, TOOL_CALL, TOOL_CALL_END, TOOL_RESPONSE

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
    text: Format = {"type": "any_tokens", "exclude_tokens": sorted(special_ids(tokenizer) | set(ids.values()))}
    reasoning = {"type": "optional", "content": _seq(token(CHANNEL), text, token(CHANNEL_END))}
    json_answer = None
    if schema is not None:
        strict = response_strict(request.response_format)
        spellings = added_spellings(tokenizer)
        json_answer = safe_json_format(schema, spellings, RESPONSE_SCHEMA_PARAM, strict, in_strings=prefixes(spellings))
    if not tools:
        return _structural_tag(_seq(reasoning, json_answer))
    quote = tokenizer.token_to_id(QUOTE)
    values = None
    if quote is not None:
        values = ArgumentFormats({"type": "token", "token": quote}, text, added_spellings(tokenizer))
    body = {"type": "any_tokens", "exclude_tokens": [i for i in text["exclude_tokens"] if i != quote]}
    calls = [_call(t, token, body, values, f"tools[{i}].function.parameters") for i, t in indexed_active_tools(request)]
    call = calls[0] if len(calls) == 1 else {"type": "or", "elements": calls}
    one = isinstance(request.tool_choice, dict) or not request.parallel_tool_calls
    only_calls = call if one else {"type": "plus", "content": call}
    if request.tool_choice != "auto":
        answer = only_calls
    elif json_answer is not None:
        answer = {"type": "or", "elements": [only_calls, json_answer]}
    elif one:
        answer = _seq(text, {"type": "optional", "content": call}, text)
    else:
        answer = _seq(text, {"type": "star", "content": _seq(call, text)})
    response = tokenizer.token_to_id(TOOL_RESPONSE)
    if response is not None:  # the call's answer is the tool's: the model stops at <|tool_response>
        answer = _seq(answer, {"type": "optional", "content": {"type": "token", "token": response}})
    return _structural_tag(_seq(reasoning, answer))


def _call(tool: dict[str, Any], token: Any, body: Format, values: ArgumentFormats | None, param: str) -> Format:
    """`<|tool_call>call:NAME{…}<tool_call|>`: arguments by the schema where it can be spelled out, else any
    arguments (or, with no quote token in the vocabulary, free text: `body`); a SchemaGrammarError naming `param`
    instead when the tool says `strict: true` (as the other families refuse a schema they cannot enforce)."""
    name = tool["function"]["name"]
    strict = tool["function"].get("strict") is True
    arguments = None if values is None else values.arguments(arguments_schema(tool), param, strict)
    if arguments is None and strict:
        raise SchemaGrammarError(_NOT_SPELLED_OUT, param)
    if arguments is None and values is not None:
        arguments = values.free_arguments()
    if arguments is None:
        opening = {"type": "const_string", "value": f"{CALL_PREFIX}{name}{{"}
        return _seq(token(TOOL_CALL), opening, body, {"type": "const_string", "value": "}"}, token(TOOL_CALL_END))
    return _seq(
        token(TOOL_CALL), {"type": "const_string", "value": f"{CALL_PREFIX}{name}"}, arguments, token(TOOL_CALL_END)
    )


_NOT_SPELLED_OUT = (
    "the JSON schema cannot be enforced in this model's call notation (a recursive, remote or unresolved $ref, "
    "nesting past 6 levels, a key or enum string holding a special token's spelling, a key with one of ':,{}', or "
    "a schema too large to spell out); set strict false for best effort"
)


def _structural_tag(fmt: Format) -> Grammar:
    return Grammar("structural_tag", json.dumps({"type": "structural_tag", "format": fmt}, ensure_ascii=False))
