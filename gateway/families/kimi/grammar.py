"""Output grammars for Kimi K3, as xgrammar structural tags written for xgrammar 0.2.7 / 0.2.8 / 0.2.9.

Markers are `token` formats by integer id (vLLM validates tags without a
tokenizer and accepts only ids), so a grammar can never be satisfied by text
that merely spells `<|open|>`; free text regions are `any_tokens` that exclude
the four control tokens. Typed values are text grammars (values.py), which
backends match against the control tokens' spelling, so they exclude the
spellings themselves. Formats used: sequence, or, optional, star, plus,
const_string, regex, grammar (EBNF), token, exclude_token, any_tokens,
any_text (`excludes`; never `max_chars`, see below). The tools section goes
to the backend as one EBNF (`gateway.grammars.ebnf_formats`): each distinct
value grammar once, referred to by every argument that takes it.

Policy (the K3 grammar-hardening rules):
* The skeleton follows the prompt: reasoning up to `<|close|>think<|sep|>`
  when it opened `think`, an optional `response` channel, then the tools
  section, `<|close|>message<|sep|>` and `<|end_of_msg|>`. Reasoning and
  response text are unconstrained.
* tool_choice "auto": the tools section is optional, so guidance starts only
  once the model opens `<|open|>tools<|sep|>`; "required" / named: it comes
  at once, with no response text: the open response channel closes empty;
  after reasoning an empty response channel may come first, as the encoder
  writes one before every tools section (the K3 seed's forced tag goes from
  `<|close|>think<|sep|>` to `<|open|>tools<|sep|>` directly; both parse
  alike). Named: only that tool. The response channel can never carry a call
  (its text excludes the control tokens, so a call spelled there is text).
* A call names a declared tool, with `index="[1-9][0-9]*"`; one call when
  parallel_tool_calls is false or a tool is named, one or more otherwise.
* Arguments (strict omitted or true): required ones in the schema's
  `required` order, typed, strings non-empty; then any number of complete
  declared optional argument tags (never a required key again). `integer`
  is written `type="number"`; unions give one tag alternative per type.
  Ambiguous schemas, explicit `strict: false` and tools without declared
  properties get the parser-compatible XTML fallback: any argument tags.
* Values: JSON ones are compact one-line JSON; raw strings keep their
  `pattern` / `minLength` where that is sound and cheap (values.py), and a
  `maxLength` up to `MAX_SETTLED_LENGTH` (a counted class without `<`). A
  larger `maxLength` is not enforced: xgrammar's `max_chars` makes every
  free-text token's mask about 40 ms at a 129K vocabulary (bench/RESULTS.md),
  and a count ending at the closing control token (which settles nothing)
  costs ~25 ms of compile a character; under strict it is a 400 naming it
  (and `keeps_raw_lengths` says so before any build). A schema xgrammar cannot use is a 400 naming it when the
  tool says `strict: true`; otherwise that value is free text without control
  tokens, so guidance never turns a valid request into an error.
* response_format json: the response channel holds that JSON; under auto
  with tools, EITHER that response OR a tools section (after an empty
  response channel), never an empty answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from backends.base import Grammar
from gateway.grammars.counted_classes import bounded_text, closed_value, is_length
from gateway.grammars.ebnf_formats import EbnfWriter
from gateway.grammars.json import RESPONSE_SCHEMA_PARAM, SchemaGrammarError, response_schema
from gateway.grammars.safe_json import raw_pattern_ebnf
from gateway.grammars.string_formats import raw_string_pattern
from gateway.types import ChatRequest

from .argument_types import Alternative, SchemaDocument, literal_text
from .markers import CLOSE, END_OF_MSG, OPEN, SEP, SPELLINGS, escape_attr
from .values import json_value_ebnf, min_length_body

Format = dict[str, Any]
MAX_SETTLED_LENGTH = 4
"""A raw string's maxLength up to this is enforced (a counted class between control tokens: on a 151k vocabulary
~26 ms of compile and ~3 ms a token mask at 4, ~92 ms and ~7 ms at 8, ~1.4 s at 64: bench/raw_length_bench.py); a
larger one is a 400 under strict and dropped under best effort."""


@dataclass(frozen=True)
class ControlIds:
    """The token ids of K3's control tokens in the served vocabulary."""

    open: int
    close: int
    sep: int
    end_of_msg: int

    @classmethod
    def of(cls, tokenizer: Any) -> ControlIds:
        """The ids from a `tokenizers.Tokenizer`; ValueError when the vocabulary lacks one."""
        ids = [tokenizer.token_to_id(t) for t in (OPEN, CLOSE, SEP, END_OF_MSG)]
        if None in ids:
            raise ValueError("the tokenizer lacks Kimi K3 control tokens")
        return cls(*ids)

    @property
    def all(self) -> list[int]:
        return [self.open, self.close, self.sep, self.end_of_msg]


@dataclass(frozen=True)
class Where:
    """Where a schema sits in the request (the 400 `param`), and whether its tool asked for `strict`."""

    param: str
    strict: bool


class _Builder:
    """Formats for one vocabulary's control ids."""

    def __init__(self, ids: ControlIds, always_strict: bool = False):
        self.ids = ids
        self.always_strict = always_strict

    def token(self, token_id: int) -> Format:
        return {"type": "token", "token": token_id}

    def text(self, nonempty: bool = False) -> Format:
        """Any text without control tokens; `nonempty`: at least one token."""
        rest: Format = {"type": "any_tokens", "exclude_tokens": self.ids.all}
        if not nonempty:
            return rest
        return {"type": "sequence", "elements": [{"type": "exclude_token", "exclude_tokens": self.ids.all}, rest]}

    def open_tag(self, head: str) -> list[Format]:
        return [self.token(self.ids.open), _const(head), self.token(self.ids.sep)]

    def close_tag(self, name: str) -> list[Format]:
        return [self.token(self.ids.close), _const(name), self.token(self.ids.sep)]

    def element(self, head: str, content: Format, name: str) -> Format:
        return _seq(*self.open_tag(head), content, *self.close_tag(name))

    def argument(self, key: str, alt: Alternative, document: SchemaDocument, required: bool, where: Where) -> Format:
        head = f'argument key="{escape_attr(key)}" type="{alt.xtml_type}"'
        value = self.value(alt, document, required, Where(f"{where.param}.properties.{key}", where.strict))
        return self.element(head, value, "argument")

    def value(self, alt: Alternative, document: SchemaDocument, required: bool, where: Where) -> Format:
        if alt.literals is not None:
            texts = [literal_text(v) for v in alt.literals]
            safe = [t for t in texts if not any(s in t for s in SPELLINGS)]
            return _or([_const(t) for t in safe]) if safe else self.text(nonempty=required)
        if alt.xtml_type == "string":
            return self.string(alt.schema or {}, required, where)
        if alt.xtml_type == "null":
            return _const("null")
        return self.json_value(document.standalone(alt.schema or {}), required, where)

    def json_value(self, schema: Any, required: bool, where: Where) -> Format:
        """Compact JSON matching `schema`; safe text when it has no spelling-free grammar, or when xgrammar cannot
        use it and the client did not ask for `strict` (then it is a 400)."""
        try:
            ebnf = json_value_ebnf(schema, where.param, where.strict)
        except SchemaGrammarError:
            if where.strict:
                raise
            ebnf = None
        return {"type": "grammar", "grammar": ebnf} if ebnf is not None else self.text(nonempty=required)

    def string(self, schema: dict[str, Any], required: bool, where: Where) -> Format:
        """A raw string body: its pattern when that can be enforced, else its minLength, else any text."""
        pattern = raw_string_pattern(schema, where.param, where.strict)
        if isinstance(pattern, str):
            ebnf = raw_pattern_ebnf(pattern, f"{where.param}.pattern", where.strict)
            if ebnf is not None:  # classes negated: a count before a literal costs ~5 ms, not ~150 (closed_value)
                return {"type": "grammar", "grammar": closed_value(ebnf) or ebnf}
        low = _min_length(schema, required, where)
        high = schema.get("maxLength")
        if is_length(high) and high >= low:
            if high <= MAX_SETTLED_LENGTH:
                return {"type": "grammar", "grammar": bounded_text(low, high, excluded="<")}
            if where.strict:
                raise SchemaGrammarError(
                    f"a strict raw string's maxLength over {MAX_SETTLED_LENGTH} is not enforced on this model "
                    "(its count costs ~25 ms of compile a character at the value's end); use a smaller maxLength "
                    "or a pattern, or set strict false for best effort",
                    f"{where.param}.maxLength",
                )
        return self.text(nonempty=low == 1) if low <= 1 else _seq(*min_length_body(low))

    def loose_argument(self) -> Format:
        """Any well-formed argument tag: the parser-compatible fallback."""
        head = {"type": "regex", "pattern": r'argument key="[^"<>]*" type="(string|number|boolean|null|array|object)"'}
        return _seq(self.token(self.ids.open), head, self.token(self.ids.sep), self.text(), *self.close_tag("argument"))

    def arguments(self, function: dict[str, Any], param: str) -> Format:
        """The argument tags of one call of `function`, whose parameters the request names `param`."""
        params = function.get("parameters") or {}
        properties = params.get("properties")
        relaxed = function.get("strict") is False and not self.always_strict
        if relaxed or not isinstance(properties, dict) or not properties:
            return _star(self.loose_argument())
        document = SchemaDocument(params)
        required = [k for k in dict.fromkeys(params.get("required") or []) if isinstance(k, str)]
        shapes = {key: document.alternatives(properties.get(key, {})) for key in {*properties, *required}}
        if any(alts is None for alts in shapes.values()):
            return _star(self.loose_argument())
        where = Where(param, function.get("strict") is True)
        elements = [_or([self.argument(k, alt, document, True, where) for alt in shapes[k]]) for k in required]
        optional = [
            self.argument(k, alt, document, False, where) for k in properties if k not in required for alt in shapes[k]
        ]
        if optional:
            elements.append(_star(_or(optional)))
        return _seq(*elements) if elements else _const("")

    def call(self, function: dict[str, Any], param: str) -> Format:
        head = [self.token(self.ids.open), _const(f'call tool="{escape_attr(function["name"])}" index="')]
        index = {"type": "regex", "pattern": r"[1-9][0-9]*"}
        return _seq(
            *head,
            index,
            _const('"'),
            self.token(self.ids.sep),
            self.arguments(function, param),
            *self.close_tag("call"),
        )

    def tools_section(self, functions: list[tuple[str, dict[str, Any]]], parallel: bool) -> Format:
        """The tools section for `functions`, each with the request path of its parameters, as one EBNF in which
        each distinct value grammar is written once (`EbnfWriter`: 200 arguments of one `$ref` share its rules)."""
        call = _or([self.call(fn, param) for param, fn in functions])
        calls = {"type": "plus", "content": call} if parallel else call
        return {"type": "grammar", "grammar": EbnfWriter().grammar(self.element("tools", calls, "tools"))}

    def answer(self, channel: str, tools: Format | None, tools_required: bool, response: Format | None) -> Format:
        """Everything after the generation prompt, which left `channel` ("think" or "response") open: the reasoning
        first in the think channel, then a response (`response`, else free text), or a tools section (at once when
        `tools_required`: the response channel is empty), or, under auto, the free response and an optional
        tools section, or with a `response` either that response or the tools section."""
        head = [self.text(), *self.close_tag("think")] if channel == "think" else []
        if tools is None:
            body = self.response(channel, response or self.text())
        elif tools_required:
            body = _seq(*self.no_response(channel), tools)
        elif response is not None:
            body = _or([self.response(channel, response), _seq(*self.no_response(channel), tools)])
        else:
            free = self.response(channel, self.text())
            body = _seq(free if channel == "response" else _optional(free), _optional(tools))
        message_end = [_optional(_seq(*self.close_tag("message"))), _optional(self.token(self.ids.end_of_msg))]
        return _seq(*head, body, *message_end)

    def response(self, channel: str, content: Format) -> Format:
        """The response channel holding `content`, opened first unless the prompt left it open."""
        opening = self.open_tag("response") if channel == "think" else []
        return _seq(*opening, content, *self.close_tag("response"))

    def no_response(self, channel: str) -> list[Format]:
        """What precedes a tools section that no response does: the close of a response channel left open, or after
        reasoning an optional empty response channel (the encoder writes one before every tools section)."""
        if channel == "response":
            return self.close_tag("response")
        return [_optional(_seq(*self.open_tag("response"), *self.close_tag("response")))]


def build_grammar(request: ChatRequest, channel: str, ids: ControlIds, always_strict: bool = False) -> Grammar | None:
    """The structural tag for `request`, whose prompt left `channel` ("think" or "response") open.

    `always_strict`: the operator's strict mode; declared schemas apply even to `strict: false` tools.
    """
    active = request.active_tools
    functions = [
        (f"tools[{i}].function.parameters", t["function"])
        for i, t in enumerate(request.tools)
        if any(t is a for a in active)
    ]
    schema = response_schema(request.response_format)
    if not functions and schema is None:
        return None
    builder = _Builder(ids, always_strict)
    parallel = request.parallel_tool_calls and not isinstance(request.tool_choice, dict)  # a named tool: one call
    tools = builder.tools_section(functions, parallel) if functions else None
    forced = bool(functions) and request.tool_choice != "auto"
    response = None
    if schema is not None and not forced:
        strict = ((request.response_format or {}).get("json_schema") or {}).get("strict") is True
        response = builder.json_value(schema, True, Where(RESPONSE_SCHEMA_PARAM, strict))
    fmt = builder.answer(channel, tools, forced, response)
    return Grammar("structural_tag", json.dumps({"type": "structural_tag", "format": fmt}, ensure_ascii=False))


def _const(value: str) -> Format:
    return {"type": "const_string", "value": value}


def _seq(*elements: Format) -> Format:
    return elements[0] if len(elements) == 1 else {"type": "sequence", "elements": list(elements)}


def _star(content: Format) -> Format:
    return {"type": "star", "content": content}


def keeps_raw_lengths(parameters: Any) -> bool:
    """Whether no raw string argument of a tool whose schema is `parameters` has a `maxLength` over
    `MAX_SETTLED_LENGTH`, which a strict build refuses (Family.keeps_strict)."""
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(properties, dict):
        return True
    document = SchemaDocument(parameters)
    for schema in properties.values():
        for alt in document.alternatives(schema) or []:
            high = (alt.schema or {}).get("maxLength")
            if alt.xtml_type == "string" and alt.literals is None and is_length(high) and high > MAX_SETTLED_LENGTH:
                return False
    return True


def _min_length(schema: dict[str, Any], required: bool, where: Where) -> int:
    """minLength of a string schema, a required one at least 1; an out-of-range bound is ignored, and a
    minLength above maxLength is a SchemaGrammarError when `strict` (nothing could satisfy it)."""
    low, high = (schema.get(k) for k in ("minLength", "maxLength"))
    low = low if is_length(low) else 0
    if is_length(high) and high < low and where.strict:
        raise SchemaGrammarError(
            f"the string cannot be enforced: minLength {low} is greater than maxLength {high}", where.param
        )
    return max(low, 1 if required else 0)


def _optional(content: Format) -> Format:
    return {"type": "optional", "content": content}


def _or(elements: list[Format]) -> Format:
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}
