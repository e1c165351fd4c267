"""Output grammars for DeepSeek V3.2 / V4 / V4.1 (DSML, each in its own tag words) as xgrammar structural tags (text markers, xgrammar ≥ 0.2.7).

Policy (the same as the hermes family's):
* tools active, tool_choice "auto": calls are lazy — free text, and a calls
  block starts at `<｜DSML｜ calls>` (one block ends the turn); "required" or a
  named tool: the answer is `\\n\\n` + a calls block; `parallel_tool_calls=false`
  or a named tool: one invoke.
* response_format json_object / json_schema: the answer is that JSON; with
  tools and "auto" the answer is EITHER calls OR the JSON.
* a prompt that opened `<think>` gets free reasoning up to `</think>` first.

Calls are built here from each tool's schema rather than with xgrammar's
`deepseek_v4_1_xml` JSON style (2–5 s to compile for five tools on the 129,280
DeepSeek vocab): one tag per declared parameter in schema order (required
ones mandatory), `string="true"` with raw text for string-typed parameters,
`string="false"` with the property's JSON schema for the others, both where
the type allows both. Built grammars are cached by their inputs.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from backends.base import Grammar
from gateway.grammars.json import response_schema
from gateway.types import ChatRequest

from .markers import THINK_END, THINK_START, V4, V32, V41, Dialect

Format = dict[str, Any]

_CALLS_LEAD = "\n\n"
_THINK_TOKENS = [THINK_START, THINK_END]
_SCHEMA_DEFINITIONS = ("$defs", "definitions")
_DIALECTS = (V32, V4, V41)


def build_grammar(request: ChatRequest, in_reasoning: bool, dialect: Dialect = V41) -> Grammar | None:
    """The grammar for `request` in `dialect`'s tags; `in_reasoning` says the prompt ends inside `<think>`."""
    key = json.dumps(
        [
            request.active_tools,
            request.tool_choice if isinstance(request.tool_choice, str) else "named",
            request.parallel_tool_calls,
            response_schema(request.response_format),
            in_reasoning,
            _DIALECTS.index(dialect),
        ],
        ensure_ascii=False,
    )
    return _grammar(key)


@lru_cache(maxsize=256)
def _grammar(key: str) -> Grammar | None:
    """Built once per distinct input: equal requests share one Grammar text (one compile in the backend)."""
    tools, choice, parallel, schema, in_reasoning, dialect = json.loads(key)
    dialect = _DIALECTS[dialect]
    if tools:
        block = _calls_block(tools, one=not parallel or choice == "named", dialect=dialect)
        if choice == "auto":
            answer = (
                _lazy_calls(block, dialect)
                if schema is None
                else {"type": "or", "elements": [_eager_calls(block), _json(schema)]}
            )
        else:
            answer = _eager_calls(block)
    elif schema is not None:
        if not in_reasoning:
            return Grammar("json_schema", json.dumps(schema, ensure_ascii=False))
        answer = _json(schema)
    else:
        return None
    if in_reasoning:
        answer = {"type": "sequence", "elements": [_reasoning(), answer]}
    return Grammar("structural_tag", json.dumps({"type": "structural_tag", "format": answer}, ensure_ascii=False))


def _calls_block(tools: list[dict[str, Any]], one: bool, dialect: Dialect) -> Format:
    """`<｜DSML｜ calls>` … `</｜DSML｜ calls>` holding one or more invokes of the declared tools."""
    return {
        "type": "tag",
        "begin": dialect.calls_open + "\n",
        "content": {
            "type": "tags_with_separator",
            "tags": [_invoke(tool["function"], dialect) for tool in tools],
            "separator": "\n",
            "at_least_one": True,
            "stop_after_first": one,
        },
        "end": "\n" + dialect.calls_close,
    }


def _lazy_calls(block: Format, dialect: Dialect) -> Format:
    return {
        "type": "triggered_tags",
        "triggers": [dialect.calls_open],
        "tags": [block],
        "excludes": _THINK_TOKENS,
        "at_least_one": False,
        "stop_after_first": True,
    }


def _eager_calls(block: Format) -> Format:
    return {"type": "sequence", "elements": [{"type": "const_string", "value": _CALLS_LEAD}, block]}


def _reasoning() -> Format:
    return {"type": "tag", "begin": "", "content": {"type": "any_text", "excludes": _THINK_TOKENS}, "end": THINK_END}


def _json(schema: Any) -> Format:
    return {"type": "json_schema", "json_schema": schema}


def _invoke(function: dict[str, Any], dialect: Dialect) -> Format:
    """One call: parameters in schema order, each line ending in a newline; none at all is one newline."""
    schema = function.get("parameters") or {}
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    if properties:
        definitions = {k: schema[k] for k in _SCHEMA_DEFINITIONS if k in schema}
        lines = [
            _parameter(name, {**definitions, **prop} if isinstance(prop, dict) else prop, name in required, dialect)
            for name, prop in properties.items()
        ]
        content: Format = {"type": "sequence", "elements": lines}
        if not required:
            content = {"type": "or", "elements": [_const("\n"), content]}
    elif schema.get("additionalProperties", True) is not False:
        content = {"type": "or", "elements": [_const("\n"), {"type": "plus", "content": _any_parameter(dialect)}]}
    else:
        content = _const("\n")
    return {
        "type": "tag",
        "begin": dialect.invoke_open(function["name"]) + "\n",
        "content": content,
        "end": dialect.invoke_close,
    }


def _parameter(name: str, schema: Any, required: bool, dialect: Dialect) -> Format:
    as_string, as_json = _value_kinds(schema)
    variants = []
    if as_string:
        variants.append(_tag(dialect.parameter_open(name, True), _string_value(schema), dialect))
    if as_json:
        variants.append(_tag(dialect.parameter_open(name, False), _json(schema), dialect))
    line = variants[0] if len(variants) == 1 else {"type": "or", "elements": variants}
    return line if required else {"type": "optional", "content": line}


def _any_parameter(dialect: Dialect) -> Format:
    """A parameter of a free-form object: any name, any value."""
    return _tag(dialect.parameter_named, {"type": "any_text"}, dialect)


def _tag(begin: str, content: Format, dialect: Dialect) -> Format:
    return {"type": "tag", "begin": begin, "content": content, "end": dialect.parameter_close + "\n"}


def _string_value(schema: Any) -> Format:
    choices = _choices(schema)
    strings = [v for v in choices or [] if isinstance(v, str)]
    if strings:
        return {"type": "or", "elements": [_const(v) for v in strings]} if len(strings) > 1 else _const(strings[0])
    return {"type": "any_text"}


def _value_kinds(schema: Any) -> tuple[bool, bool]:
    """Whether the value may be written raw (string="true") and as JSON (string="false")."""
    if not isinstance(schema, dict):
        return True, True
    choices = _choices(schema)
    if choices is not None:
        return any(isinstance(v, str) for v in choices), any(not isinstance(v, str) for v in choices)
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else list(kind or [])
    if not kinds:
        return True, True
    return "string" in kinds, any(k != "string" for k in kinds)


def _choices(schema: Any) -> list[Any] | None:
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return [schema["const"]]
    enum = schema.get("enum")
    return list(enum) if isinstance(enum, list) and enum else None


def _const(value: str) -> Format:
    return {"type": "const_string", "value": value}
