"""Output grammars for gpt-oss, as xgrammar structural tags valid for xgrammar 0.2.7 / 0.2.8.

The generation prompt ends with `<|start|>assistant`, so the grammar starts
in the first header. Harmony's control tokens are `token` formats by integer
id (vLLM validates tags without a tokenizer and accepts only ids); free text
is `any_tokens` excluding every special token of the vocabulary (the control
tokens, so a message can only end at its real terminator, and the unused
`<|reserved_…|>` ones, which the parser would show as text). Formats used:
sequence, or, star, const_string, token, any_tokens, grammar (EBNF for
compact JSON).

Policy:
* tool_choice "auto": any number of analysis messages, then the final answer
  (`<|return|>`); or analysis messages and commentary preambles, then one call
  `to=functions.NAME<|channel|>commentary <|constrain|>json<|message|>{…}<|call|>`
  (a call ends the turn). A preamble announces calls (Harmony's format: "to
  inform the user about the tools it is about to call"), so one is followed
  by a call, never by the final answer (whose content a response_format
  makes JSON alone). "required" / named: a call must come, a preamble may
  precede it (content beside the call: OpenAI's "required" asks that the
  model call a tool, and a Chat Completions message may carry content and
  tool calls); named: only that tool.
* Arguments follow the tool's schema unless the tool says `strict: false`
  (then any JSON object); a schema with no spelling-safe grammar is a 400 with
  `strict: true`, else any JSON object.
* response_format json_object / json_schema: the final answer is that JSON.
* No string in the JSON can hold a control token's spelling (the vocabulary's
  special tokens, `<|reserved_…` by its prefix), so a backend whose xgrammar
  vocabulary spells control tokens as text (SGLang, vLLM) cannot put `<|call|>`
  inside a value (`gateway.grammars.safe_json`); the text can still be written
  escaped (`\\u003c|call|>`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from backends.base import Grammar
from gateway.grammars.json import RESPONSE_SCHEMA_PARAM, response_schema, response_strict
from gateway.grammars.safe_json import control_spellings, safe_json_format, special_ids
from gateway.grammars.tool_calls import arguments_schema
from gateway.types import ChatRequest

from .markers import ANALYSIS, CALL, CHANNEL, COMMENTARY, CONSTRAIN, CONTROL_TOKENS, END, FINAL, MESSAGE, RETURN, START

Format = dict[str, Any]


@dataclass(frozen=True)
class ControlIds:
    """Harmony's control-token ids in the served vocabulary, by spelling."""

    ids: dict[str, int]
    spellings: tuple[str, ...]
    """What no JSON string may contain (`safe_json.control_spellings`)."""
    specials: frozenset[int]
    """Every special added token's id: what free text excludes."""

    @classmethod
    def of(cls, tokenizer: Any) -> ControlIds:
        """The ids from a `tokenizers.Tokenizer`; ValueError when the vocabulary lacks one."""
        ids = {t: tokenizer.token_to_id(t) for t in CONTROL_TOKENS}
        missing = [t for t, i in ids.items() if i is None]
        if missing:
            raise ValueError(f"the tokenizer lacks Harmony control tokens {', '.join(missing)}")
        return cls(ids, control_spellings(tokenizer), special_ids(tokenizer) | set(ids.values()))

    def token(self, spelling: str) -> Format:
        return {"type": "token", "token": self.ids[spelling]}

    def text(self) -> Format:
        """Any tokens but the special ones (the control tokens and the reserved ones)."""
        return {"type": "any_tokens", "exclude_tokens": sorted(self.specials)}


def _const(text: str) -> Format:
    return {"type": "const_string", "value": text}


def _seq(*elements: Format) -> Format:
    return {"type": "sequence", "elements": list(elements)}


def _or(elements: list[Format]) -> Format:
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}


def message(ids: ControlIds, channel: str, body: Format, end: str) -> list[Format]:
    """`<|channel|>CHANNEL<|message|>BODY` and its terminator."""
    return [ids.token(CHANNEL), _const(channel), ids.token(MESSAGE), body, ids.token(end)]


def call(ids: ControlIds, tool: dict[str, Any], param: str) -> Format:
    """One call of `tool`, recipient in the role part as gpt-oss generates it, arguments as compact JSON."""
    fn = tool["function"]
    arguments = safe_json_format(arguments_schema(tool), ids.spellings, param, fn.get("strict") is True)
    return _seq(
        _const(f" to=functions.{fn['name']}"),
        ids.token(CHANNEL),
        _const(f"{COMMENTARY} "),
        ids.token(CONSTRAIN),
        _const("json"),
        ids.token(MESSAGE),
        arguments,
        ids.token(CALL),
    )


def build_grammar(request: ChatRequest, tokenizer: Any) -> Grammar | None:
    """The grammar for `request`, or None when nothing constrains the output."""
    tools = request.active_tools
    schema = response_schema(request.response_format)
    if not tools and schema is None:
        return None
    ids = ControlIds.of(tokenizer)
    next_message = [ids.token(START), _const("assistant")]
    analysis = _seq(*message(ids, ANALYSIS, ids.text(), END), *next_message)
    answers: list[Format] = []
    if request.tool_choice == "auto" or not tools:
        strict = response_strict(request.response_format)
        body = ids.text() if schema is None else safe_json_format(schema, ids.spellings, RESPONSE_SCHEMA_PARAM, strict)
        answers.append(_seq({"type": "star", "content": analysis}, *message(ids, FINAL, body, RETURN)))
    names = {t["function"]["name"] for t in tools}
    calls = [
        call(ids, t, f"tools[{i}].function.parameters")
        for i, t in enumerate(request.tools)
        if t["function"]["name"] in names
    ]
    if calls:
        preamble = _seq(*message(ids, COMMENTARY, ids.text(), END), *next_message)
        answers.append(_seq({"type": "star", "content": _or([analysis, preamble])}, _or(calls)))
    fmt = _or(answers)
    return Grammar("structural_tag", json.dumps({"type": "structural_tag", "format": fmt}, ensure_ascii=False))
