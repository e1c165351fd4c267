"""Structural tags for token-section tool calls (DeepSeek V3 / V3.1, Kimi K2), for xgrammar 0.2.7 / 0.2.8.

Markers are `token` formats by integer id (vLLM validates tags without a
tokenizer and accepts only ids), so text that spells a marker never satisfies
one; free text is `any_tokens` excluding the section's and `<think>`'s control tokens.
Formats used: sequence, or, optional, plus, const_string, regex, grammar,
token, any_tokens.

Policy (the same as the other families'):
* reasoning first when the prompt opened `<think>`: any tokens but `</think>`, then `</think>`;
* tool_choice "auto": free text, then optionally one section; "required" or a
  named tool: the section comes at once; named: only that tool;
  `parallel_tool_calls=false`: one call;
* a call names a declared tool in the variant's layout (`CallLayout`); its
  arguments are compact JSON matching the tool's parameters (strict omitted or
  true) or any JSON object (`strict: false`, or a schema xgrammar cannot use),
  and no string in them can spell a control token (`gateway.grammars.safe_json`);
* response_format json: the answer is that JSON; with tools and "auto" it is
  EITHER a section OR the JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from backends.base import Grammar
from gateway.families.token_sections import SectionMarkers
from gateway.grammars.json import RESPONSE_SCHEMA_PARAM, response_schema, response_strict
from gateway.grammars.safe_json import safe_json_format
from gateway.grammars.tool_calls import indexed_active_tools
from gateway.types import ChatRequest

Format = dict[str, Any]
_ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class CallLayout:
    """One call between the call-begin and call-end tokens: `header` (`{name}` filled in), an `index`
    (digits) after it when the format numbers calls, the arguments token, then `before` JSON `after`."""

    header: str
    index: bool = False
    before: str = ""
    after: str = ""


@dataclass(frozen=True)
class SectionIds:
    """The served vocabulary's ids of a section format's tokens."""

    section_begin: int
    section_end: int
    call_begin: int
    call_end: int
    arguments_begin: int
    think_start: int | None
    think_end: int | None
    spellings: tuple[str, ...]

    @classmethod
    def of(cls, tokenizer: Any, markers: SectionMarkers) -> SectionIds:
        """The ids from a `tokenizers.Tokenizer`; ValueError when the vocabulary lacks a marker."""
        names = (markers.section_begin, markers.section_end, markers.call_begin, markers.call_end)
        ids = [tokenizer.token_to_id(t) for t in (*names, markers.arguments_begin)]
        if None in ids:
            raise ValueError(f"the tokenizer lacks the tool-call tokens {', '.join(names)}")
        spellings = (*names, markers.arguments_begin, markers.think_start, markers.think_end)
        think = [tokenizer.token_to_id(markers.think_start), tokenizer.token_to_id(markers.think_end)]
        return cls(*ids, *think, spellings)

    @property
    def control(self) -> list[int]:
        """The tokens free text never takes: the section's and reasoning's markers."""
        section = [self.section_begin, self.section_end, self.call_begin, self.call_end, self.arguments_begin]
        return section + [i for i in (self.think_start, self.think_end) if i is not None]


def build_section_grammar(
    request: ChatRequest, in_reasoning: bool, ids: SectionIds, layout: CallLayout
) -> Grammar | None:
    """The structural tag for `request`; `in_reasoning` says the prompt ends inside `<think>`."""
    tools = request.active_tools
    schema = response_schema(request.response_format)
    if not tools and schema is None:
        return None
    if tools:
        calls = _or([_call(i, tool, ids, layout) for i, tool in indexed_active_tools(request)])
        section = _seq(_token(ids.section_begin), _plus(calls, request.parallel_tool_calls), _token(ids.section_end))
        if request.tool_choice != "auto":
            answer = section
        elif schema is not None:
            answer = _or([section, _json(schema, ids, RESPONSE_SCHEMA_PARAM, response_strict(request.response_format))])
        else:
            answer = _seq(_text(ids), {"type": "optional", "content": section})
    else:
        answer = _json(schema, ids, RESPONSE_SCHEMA_PARAM, response_strict(request.response_format))
    if in_reasoning and ids.think_end is not None:
        reasoning = {"type": "any_tokens", "exclude_tokens": [ids.think_end]}
        answer = _seq(reasoning, _token(ids.think_end), answer)
    return Grammar("structural_tag", json.dumps({"type": "structural_tag", "format": answer}, ensure_ascii=False))


def _call(index: int, tool: dict[str, Any], ids: SectionIds, layout: CallLayout) -> Format:
    function = tool["function"]
    name = function["name"]
    enforced = function.get("strict") is not False
    schema = (function.get("parameters") or _ANY_OBJECT) if enforced else _ANY_OBJECT
    head = [_token(ids.call_begin), _const(layout.header.format(name=name))]
    if layout.index:
        head.append({"type": "regex", "pattern": "[0-9]+"})
    arguments = _json(schema, ids, f"tools[{index}].function.parameters", function.get("strict") is True)
    parts = [*head, _token(ids.arguments_begin), _const(layout.before.format(name=name)), arguments]
    return _seq(*parts, _const(layout.after), _token(ids.call_end))


def _json(schema: Any, ids: SectionIds, param: str, strict: bool) -> Format:
    """Compact JSON for `schema` free of control spellings (see `safe_json_format`)."""
    return safe_json_format(schema, ids.spellings, param, strict)


def _text(ids: SectionIds) -> Format:
    return {"type": "any_tokens", "exclude_tokens": ids.control}


def _token(token_id: int) -> Format:
    return {"type": "token", "token": token_id}


def _const(value: str) -> Format:
    return {"type": "const_string", "value": value}


def _plus(content: Format, many: bool) -> Format:
    return {"type": "plus", "content": content} if many else content


def _seq(*elements: Format) -> Format:
    kept = [e for e in elements if not (e.get("type") == "const_string" and not e["value"])]
    return kept[0] if len(kept) == 1 else {"type": "sequence", "elements": kept}


def _or(elements: list[Format]) -> Format:
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}
