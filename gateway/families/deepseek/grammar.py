"""Output grammars for DeepSeek V3.2 / V4 / V4.1 (DSML, each in its own tag words) as xgrammar structural tags.

Policy (the same as the hermes family's):
* tools active, tool_choice "auto": calls are lazy — free text, then at most
  one calls block `<｜DSML｜ calls>` … (it ends the turn); "required" or a
  named tool: the answer is `\\n\\n` + a calls block; `parallel_tool_calls=false`
  or a named tool: one invoke.
* response_format json_object / json_schema: the answer is that JSON; with
  tools and "auto" the answer is EITHER calls OR the JSON.
* a prompt that opened `<think>` gets its reasoning up to `</think>` first.
* a tool that says `strict: false` takes any parameters (names, raw or JSON values), as hermes, qwen3_xml and
  glm take any JSON object for it; so does one that declares no `properties`. Two free parameters may share a
  name: the parser streams both keys, read as vLLM's dict reads them (last wins; grammars/free_names.py).

Markers: where the served vocabulary has `｜DSML｜` as an added token (V4,
V4.1), every tag is `<` or `</`, that token by id, then its words as text,
since the parser (lexer.py) counts a tag only there: the marker's spelling in
ordinary tokens is text to it and must never open or close anything here.
Free text before lazy calls holds neither the marker nor the think markers
(by spelling, which excludes their tokens too: backends' xgrammar sees an added
token as its spelling), so `<` then the token is where a calls block starts.
The think block ends only at the `</think>` token where there is one
(`gateway.grammars.reasoning`). A vocabulary without the token gets every tag
as text.

Calls are built here from each tool's schema rather than with xgrammar's
`deepseek_v4_1_xml` JSON style (2–5 s to compile for five tools on the 129,280
DeepSeek vocab): one line per declared parameter in schema order (required
ones mandatory), `string="true"` with raw text for string-typed parameters,
`string="false"` with the property's JSON for the others, both where the type
allows both (a local `$ref` and `anyOf` / `oneOf` are looked into). No value
can end early or hold a think marker: a raw value (it has no escape) holds no
closing tag `</｜DSML｜`, no think marker and none of the first characters of
the vocabulary's special added tokens (`DsmlVocabulary.special_starts`), and `<｜DSML｜`
only as a whole tag `<｜DSML｜ … >`, which the parser keeps in the value as the
model writes when it quotes DSML (a recorded V4.1 output does); an enum value
is one of its strings, a pattern its regex where `safe_json.raw_pattern_ebnf`
enforces it, a `minLength` / `maxLength` a counted class without `<` (`counted_classes.bounded_text`; beside a
pattern, its one count that varies narrowed, `length_bounds.length_bounded`, where none can be a 400 under strict:
`raw_lengths_held`), counted up to the closing tag. (A counted value that admits a `<` no close follows needs a rule
per count left, ~36 ms of compile a character: bench/RESULTS.md, dsml18.) A JSON value is `safe_json`'s compact JSON whose strings exclude
the same starts and the markers whole (they can write them escaped),
and so is a response_format answer. Built grammars are cached by their inputs
and vocabulary. The calls block goes to the backend as one EBNF (`gateway.grammars.ebnf_formats`), in which
each distinct value grammar is written once and every parameter that takes it refers to it (1,000 integer
parameters: 131 KB, not the 4.5 MB of a copy each).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from backends.base import Grammar
from gateway.families.json_pointer import resolve_pointer
from gateway.grammars.all_of import SIBLING_ASSERTIONS, UNIONS, admitted_values, folded_branch, unfolded_keyword
from gateway.grammars.counted_classes import bounded_text, closed_value, is_length
from gateway.grammars.ebnf_formats import EbnfWriter
from gateway.grammars.json import ANY_OBJECT, RESPONSE_SCHEMA_PARAM, SchemaGrammarError, response_schema
from gateway.grammars.json import response_strict as answer_strict
from gateway.grammars.length_bounds import length_bounded
from gateway.grammars.markers import TEXT_MARKERS, MarkerTokens
from gateway.grammars.reasoning import ThinkBlock, with_reasoning
from gateway.grammars.safe_json import json_value_ebnf, raw_pattern_ebnf
from gateway.grammars.string_formats import raw_string_pattern
from gateway.types import ChatRequest

from .markers import DSML, THINK_END, THINK_START, V4, V32, V41, Dialect

Format = dict[str, Any]

_CALLS_LEAD = "\n\n"
_THINK = ThinkBlock(THINK_START, THINK_END)
_MARKERS = (DSML, THINK_START, THINK_END)
_SCHEMA_DEFINITIONS = ("$defs", "definitions")
_DIALECTS = (V32, V4, V41)
_ANY_VALUE: dict[str, Any] = {}
_MAX_REF_DEPTH = 8
_NOT_PAIRED = frozenset({"format", "$ref", "anyOf", "oneOf", "allOf", "enum", "const"})
"""Keywords beside which a raw string's pattern and length are not written as one count (`raw_lengths_held`)."""
_OPENING_TAG = "<" + DSML
_CLOSING_TAG = "</" + DSML
_TAG_BODY = r'([^"<>｜]|"[^"<｜]*")*>'
"""A DSML tag's body as the lexer reads it (text up to a `>` outside quotes), with no `<` or `｜` in it."""


@dataclass(frozen=True, eq=False)
class DsmlVocabulary:
    """The served vocabulary's markers (`markers`: `｜DSML｜` and the think markers' token ids where it has them)
    and what values exclude. Compared by identity: a family builds one and grammars are cached per instance."""

    markers: MarkerTokens = TEXT_MARKERS

    @classmethod
    def of(cls, tokenizer: Any) -> DsmlVocabulary:
        return cls(MarkerTokens.of(tokenizer, _MARKERS))

    @cached_property
    def json_spellings(self) -> tuple[str, ...]:
        """The spellings a JSON value's strings exclude by `safe_json` (each starts with `<`)."""
        return tuple(s for s in self.markers.values_exclude if s != DSML) or (THINK_START, THINK_END)

    @cached_property
    def in_json_strings(self) -> tuple[str, ...]:
        """What a JSON string excludes: `｜DSML｜` and the think markers whole, and the `special_starts`."""
        return (*_MARKERS, *self.special_starts)

    @cached_property
    def raw_excludes(self) -> list[str]:
        """What a raw string value's text excludes: a closing DSML tag, the think markers whole, and the
        `special_starts`."""
        return [_CLOSING_TAG, THINK_START, THINK_END, *self.special_starts]

    @cached_property
    def special_starts(self) -> tuple[str, ...]:
        """The special added tokens' spellings by their first characters (three at least, more where `<｜DSML｜`
        starts the same): what excludes every one of them with the fewest strings (1,230 specials in DeepSeek V4's
        vocabulary, 8 starts; xgrammar's compile time grows with the excluded strings)."""
        specials = [s for s in self.json_spellings if s not in _MARKERS]
        return _starts(specials, least=3, allowed=_OPENING_TAG)


def _starts(spellings: list[str], least: int, allowed: str) -> tuple[str, ...]:
    """For each spelling its shortest prefix of at least `least` characters that `allowed` does not start with (the
    whole spelling when there is none), without those that a shorter one covers."""
    starts = set()
    for spelling in spellings:
        n = least
        while n < len(spelling) and allowed.startswith(spelling[:n]):
            n += 1
        starts.add(spelling[:n])
    return tuple(sorted(s for s in starts if not any(s != t and s.startswith(t) for t in starts)))


TEXT_VOCABULARY = DsmlVocabulary()
"""Every marker as text (a vocabulary without the DSML token)."""


def build_grammar(
    request: ChatRequest, in_reasoning: bool, dialect: Dialect = V41, vocabulary: DsmlVocabulary = TEXT_VOCABULARY
) -> Grammar | None:
    """The grammar for `request` in `dialect`'s tags on `vocabulary`; `in_reasoning` says the prompt ends inside
    `<think>`."""
    key = json.dumps(
        [
            request.active_tools,
            request.tool_choice if isinstance(request.tool_choice, str) else "named",
            request.parallel_tool_calls,
            response_schema(request.response_format),
            answer_strict(request.response_format),
            in_reasoning,
            _DIALECTS.index(dialect),
        ],
        ensure_ascii=False,
    )
    return _grammar(key, vocabulary)


@lru_cache(maxsize=256)
def _grammar(key: str, vocabulary: DsmlVocabulary) -> Grammar | None:
    """Built once per distinct input: equal requests share one Grammar text (one compile in the backend)."""
    tools, choice, parallel, schema, strict, in_reasoning, dialect = json.loads(key)
    writer = _Writer(_DIALECTS[dialect], vocabulary)
    answer = None
    if schema is not None and (not tools or choice == "auto"):
        answer = writer.json_value(schema, RESPONSE_SCHEMA_PARAM, strict, fallback=ANY_OBJECT)
    if tools:
        block = writer.calls_block(tools, one=not parallel or choice == "named")
        if choice != "auto":
            answer = writer.eager_calls(block)
        elif answer is None:
            answer = writer.lazy_calls(block)
        else:
            answer = {"type": "or", "elements": [writer.eager_calls(block), answer]}
    elif answer is None:
        return None
    elif not in_reasoning:
        return Grammar("ebnf", answer["grammar"])
    return with_reasoning(answer, prompt_opens_reasoning=in_reasoning, reasoning_optional=False, think=_THINK,
                          markers=vocabulary.markers, excludes=(DSML,))  # fmt: skip


class _Writer:
    """Formats in one dialect's tags on one vocabulary."""

    def __init__(self, dialect: Dialect, vocabulary: DsmlVocabulary):
        self.dialect = dialect
        self.vocabulary = vocabulary
        self.dsml = vocabulary.markers.token(DSML)
        self._shared_texts: dict[str, Format] = {}

    def marked(self, text: str) -> Format:
        """`text` with each `｜DSML｜` in it as the token where the vocabulary has one."""
        if self.dsml is None:
            return _const(text)
        elements: list[Format] = []
        for n, part in enumerate(text.split(DSML)):
            elements += ([self.dsml] if n else []) + ([_const(part)] if part else [])
        return _seq(elements)

    def calls_block(self, tools: list[dict[str, Any]], one: bool) -> Format:
        """`<｜DSML｜ calls>` … `</｜DSML｜ calls>` holding one or more invokes of the declared tools, as one EBNF in
        which each distinct value grammar is written once (`EbnfWriter`)."""
        d = self.dialect
        invoke = _or([self.invoke(t["function"], f"tools[{i}].function.parameters") for i, t in enumerate(tools)])
        invokes = invoke if one else _seq([invoke, {"type": "star", "content": _seq([_const("\n"), invoke])}])
        block = _seq([self.marked(d.calls_open + "\n"), invokes, self.marked("\n" + d.calls_close)])
        return {"type": "grammar", "grammar": EbnfWriter().grammar(block)}

    def lazy_calls(self, block: Format) -> Format:
        """Free text without a marker, then at most one calls block."""
        return _seq([{"type": "any_text", "excludes": list(_MARKERS)}, {"type": "optional", "content": block}])

    def eager_calls(self, block: Format) -> Format:
        return _seq([_const(_CALLS_LEAD), block])

    def invoke(self, function: dict[str, Any], param: str) -> Format:
        """One call: parameters in schema order, each line ending in a newline; none at all is one newline. A tool
        that says `strict: false` takes any parameters, as the tag families take any object for it (and SGLang's
        structural tag for a tool that is not strict)."""
        schema = (function.get("parameters") or {}) if function.get("strict") is not False else {}
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        strict = function.get("strict") is True
        if properties:
            definitions = {k: schema[k] for k in _SCHEMA_DEFINITIONS if k in schema}
            lines = [
                self.parameter(
                    name,
                    {**definitions, **prop} if isinstance(prop, dict) else prop,
                    name in required,
                    _Where(f"{param}.properties.{name}", strict),
                )
                for name, prop in properties.items()
            ]
            content = _seq(lines)
            if not required:
                content = _or([_const("\n"), content])
        elif schema.get("additionalProperties", True) is not False:
            content = _or([_const("\n"), {"type": "plus", "content": self.any_parameter(param)}])
        else:
            content = _const("\n")
        d = self.dialect
        return _seq([self.marked(d.invoke_open(function["name"]) + "\n"), content, self.marked(d.invoke_close)])

    def parameter(self, name: str, schema: Any, required: bool, where: _Where) -> Format:
        as_string, as_json = _value_kinds(schema, schema)
        variants = []
        if as_string:
            variants.append(self.raw_line(self.parameter_open(name, True), self.string_value(schema, where)))
        if as_json:
            value = self.json_value(schema, where.param, where.strict, fallback=_ANY_VALUE)
            variants.append(self.line(self.parameter_open(name, False), value))
        line = _or(variants)
        return line if required else {"type": "optional", "content": line}

    def any_parameter(self, param: str) -> Format:
        """A parameter of a free-form object: any name, a raw or a JSON value."""
        name = {"type": "any_text", "excludes": ['"', ">", "<", DSML]}
        raw = _seq([_const('" string="true">'), self.raw_text()])
        value = self.json_value(_ANY_VALUE, param, False, fallback=_ANY_VALUE)
        parsed = _seq([_const('" string="false">'), value])
        return _seq([self.shared(self.dialect.parameter_named), name, _or([raw, parsed]), self.close_line()])

    def parameter_open(self, name: str, is_string: bool) -> Format:
        """`dialect.parameter_open(name, is_string)`, the text every parameter's tag shares written once (`shared`)
        and referred to: a parameter line adds only its name to the positions xgrammar computes a token mask at,
        each of which costs in proportion to the grammar's rule count (DeepSeek V4.1's 2,000 optional parameters:
        ~50 such positions a line, ~4 s to compile, ~0.3 s with ~5)."""
        kind = self.dialect.parameter_open(name, is_string).removeprefix(self.dialect.parameter_named + name)
        return _seq([self.shared(self.dialect.parameter_named), _const(name), self.shared(kind)])

    def shared(self, text: str) -> Format:
        """`marked(text)` as one format object for every use, which `EbnfWriter` writes as one rule."""
        if text not in self._shared_texts:
            marked = self.marked(text)
            self._shared_texts[text] = (
                marked if marked["type"] == "sequence" else {"type": "sequence", "elements": [marked]}
            )
        return self._shared_texts[text]

    def line(self, opening: Format, value: Format) -> Format:
        return _seq([opening, value, self.close_line()])

    def raw_line(self, opening: Format, value: Format) -> Format:
        """`line` for a raw value; a pattern's grammar that counts (`^.{1,100}$`) written with the closing tag in its
        own rule (`counted_classes.closed_value`): the close starts with `<`, which the value never holds, so
        xgrammar settles the count there (~20 ms of compile on Qwen3's vocabulary, not ~2.4 s)."""
        if value["type"] == "grammar":
            close = EbnfWriter().expression(self.marked(self.dialect.parameter_close + "\n"))
            if (closed := closed_value(value["grammar"], close)) is not None:
                return _seq([opening, {"type": "grammar", "grammar": closed}])
        return self.line(opening, value)

    def close_line(self) -> Format:
        return self.shared(self.dialect.parameter_close + "\n")

    def raw_text(self) -> Format:
        """A raw value's text: no closing DSML tag (the parser ends a value at `</｜DSML｜ parameter>`), and a
        `<｜DSML｜` only as a whole tag (the parser keeps it in the value; one left open would take the value's
        closing tag into its body), as the model writes when it quotes DSML."""
        tag = {"type": "regex", "pattern": _TAG_BODY}
        return {
            "type": "dispatch",
            "rules": [[_OPENING_TAG, tag]],
            "loop": True,
            "excludes": self.vocabulary.raw_excludes,
        }

    def string_value(self, schema: Any, where: _Where) -> Format:
        """A raw value: one of its string choices that holds no excluded spelling, or its pattern where that is
        enforced (`safe_json.raw_pattern_ebnf`), else any text without an excluded spelling; a union with assertions
        beside it, one of its string branches' raw values, each folded with them (`_string_branches`)."""
        branches = _string_branches(schema, where)
        if branches is not None:
            values = [self.string_value(branch, where) for branch in branches]
            unique = list({json.dumps(v, sort_keys=True): v for v in values}.values())
            return self.raw_text() if not unique or self.raw_text() in unique else _or(unique)
        excludes = (DSML, *self.vocabulary.raw_excludes)
        strings = [v for v in _choices(schema) or [] if isinstance(v, str) and not any(s in v for s in excludes)]
        if strings:
            return _or([_const(v) for v in strings])
        pattern = raw_string_pattern(schema, where.param, where.strict)
        ebnf = raw_pattern_ebnf(pattern, f"{where.param}.pattern", True) if isinstance(pattern, str) else None
        bounds = _length_bounds(schema, where)
        if bounds is not None and pattern is not None:
            bounded = length_bounded(ebnf, *bounds) if ebnf is not None else None
            if bounded is None and where.strict:
                raise _length_beside_pattern(schema, where)
            ebnf = bounded or ebnf  # best effort: the pattern alone (left out too where it needs `<`)
        elif bounds is not None:
            ebnf = bounded_text(
                *bounds, excluded="".join({s[0] for s in (_OPENING_TAG, *self.vocabulary.raw_excludes)})
            )
        return {"type": "grammar", "grammar": ebnf} if ebnf is not None else self.raw_text()

    def json_value(self, schema: Any, param: str, strict: bool, fallback: Any) -> Format:
        """Compact JSON of `schema` whose strings hold no marker; where it has none, a 400 when `strict`, else
        JSON of `fallback`. A schema xgrammar cannot use is a 400 (SchemaGrammarError naming `param`)."""
        vocabulary = self.vocabulary
        spellings, in_strings = vocabulary.json_spellings, vocabulary.in_json_strings
        ebnf = json_value_ebnf(schema, spellings, param, True, in_strings=in_strings, exact=strict)
        if ebnf is None and strict:
            raise SchemaGrammarError("the JSON schema cannot be enforced without control-token text", param)
        if ebnf is None:
            ebnf = json_value_ebnf(fallback, spellings, param, True, in_strings=in_strings)
        return {"type": "grammar", "grammar": ebnf}


def raw_lengths_held(parameters: Any) -> frozenset[str]:
    """The places (`.properties.x`) of a tool's `parameters` whose raw string value holds its `pattern` and its
    `minLength` / `maxLength` together, a strict build refusing a pair it cannot hold exactly (`string_value`): a
    property of type string alone, without a `format`, union, reference or listed values (Family.raw_lengths_held)."""
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(properties, dict):
        return frozenset()
    return frozenset(f".properties.{name}" for name, schema in properties.items() if _raw_pair(schema))


def _raw_pair(schema: Any) -> bool:
    """Whether `schema` is a raw string with a `pattern` and a length (each given one counted: `is_length`) that
    `string_value` writes together."""
    lengths = [schema[k] for k in ("minLength", "maxLength") if k in schema] if isinstance(schema, dict) else []
    return (
        isinstance(schema, dict)
        and schema.get("type") in ("string", ["string"])
        and isinstance(schema.get("pattern"), str)
        and bool(lengths)
        and all(map(is_length, lengths))
        and not _NOT_PAIRED & schema.keys()
    )


@dataclass(frozen=True)
class _Where:
    """Where a parameter's schema sits in the request (the 400 `param`), and whether its tool said `strict`."""

    param: str
    strict: bool


def _length_bounds(schema: Any, where: _Where) -> tuple[int, int | None] | None:
    """A raw string's `minLength` .. `maxLength` (None: no most), out-of-range ones ignored; None for neither. A
    minLength above maxLength is a SchemaGrammarError under strict (no value has it), else maxLength is ignored."""
    low, high = (schema.get(k) if isinstance(schema, dict) else None for k in ("minLength", "maxLength"))
    low, high = (v if is_length(v) else None for v in (low, high))
    if low is None and high is None:
        return None
    if low is not None and high is not None and high < low:
        if where.strict:
            raise SchemaGrammarError(
                f"the string cannot be enforced: minLength {low} is greater than maxLength {high}",
                f"{where.param}.maxLength",
            )
        high = None
    return low or 0, high


def _length_beside_pattern(schema: dict[str, Any], where: _Where) -> SchemaGrammarError:
    """The strict 400 for a length the raw value cannot hold exactly with its pattern, named as unenforced.py names
    a length beside a pattern (its first length keyword)."""
    keyword = next(k for k in ("minLength", "maxLength") if k in schema)
    return SchemaGrammarError(
        f"a strict schema's '{keyword}' beside this 'pattern' is not enforced on this model's raw string arguments "
        "(only a pattern of literals and character classes with one count that varies, or whose counts imply the "
        "length, and whose strings have such a length); write the length into the pattern, or set strict false for "
        "best effort",
        f"{where.param}.{keyword}",
    )


def _value_kinds(schema: Any, root: Any, depth: int = 0) -> tuple[bool, bool]:
    """Whether the value may be written raw (string="true") and as JSON (string="false"); `root` is the parameter's
    schema with the tool's definitions, where a local `$ref` is looked up."""
    if not isinstance(schema, dict):
        return True, True
    choices = _choices(schema)
    if choices is not None:
        return any(isinstance(v, str) for v in choices), any(not isinstance(v, str) for v in choices)
    ref = schema.get("$ref")
    target = resolve_pointer(root, ref) if isinstance(ref, str) and depth < _MAX_REF_DEPTH else None
    if isinstance(target, dict):
        return _value_kinds(target, root, depth + 1)
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else list(kind or [])
    if kinds:
        return "string" in kinds, any(k != "string" for k in kinds)
    branches = [b for key in ("anyOf", "oneOf") if isinstance(schema.get(key), list) for b in schema[key]]
    if not branches:
        return True, True
    each = [_value_kinds(b, root, depth + 1) for b in branches]
    return any(raw for raw, _ in each), any(parsed for _, parsed in each)


def _string_branches(schema: Any, where: _Where) -> list[Any] | None:
    """The branches of `schema`'s `anyOf` / `oneOf` that admit a string, each with the assertions beside the union
    folded in (`all_of.folded_branch`, as the JSON values' `safe_json` folds them: a `pattern` or `enum` beside
    `anyOf: [string, null]` holds for the raw string too); None where `schema` says no union with assertions beside
    it (its own keywords are the raw value's). A branch that does not fold exactly is kept alone, best effort: under
    strict a SchemaGrammarError naming the keyword (unenforced.py refuses it before any build)."""
    key = next((k for k in UNIONS if isinstance(schema, dict) and isinstance(schema.get(k), list) and schema[k]), None)
    beside = {k: v for k, v in schema.items() if k in SIBLING_ASSERTIONS and k != key} if key else {}
    if not beside:
        return None
    branches, empty = [], []  # `empty`: branches whose listed values are all refused (no value)
    for branch in schema[key]:
        target = _target(branch, schema)
        folded = folded_branch(beside, target, where.param) if target is not None else None
        if folded is None and where.strict:
            keyword = unfolded_keyword(beside, schema[key])
            raise SchemaGrammarError(
                f"the JSON schema cannot be enforced: '{keyword}' beside '{key}' cannot be folded into its branches",
                f"{where.param}.{keyword}",
            )
        one = branch if folded is None else folded
        if one is not False and _value_kinds(one, schema)[0]:
            (empty if isinstance(one, dict) and admitted_values(one) == [] else branches).append(one)
    return branches or empty


def _target(branch: Any, root: Any) -> Any:
    """A union's branch, a local `$ref` one its target with the branch's other keywords; None where it does not
    resolve."""
    if not isinstance(branch, dict) or "$ref" not in branch:
        return branch
    ref = branch["$ref"]
    target = resolve_pointer(root, ref) if isinstance(ref, str) else None
    if not isinstance(target, dict) or "$ref" in target:
        return None
    return {**target, **{k: v for k, v in branch.items() if k != "$ref"}}


def _choices(schema: Any) -> list[Any] | None:
    """A literal schema's values that its other keywords admit (as the JSON grammars keep them); all of them where
    none is, or they cannot be checked (unenforced.py refuses that under strict)."""
    if not isinstance(schema, dict):
        return None
    listed = [schema["const"]] if "const" in schema else schema.get("enum")
    return (admitted_values(schema) or list(listed)) if isinstance(listed, list) and listed else None


def _const(value: str) -> Format:
    return {"type": "const_string", "value": value}


def _seq(elements: list[Format]) -> Format:
    return elements[0] if len(elements) == 1 else {"type": "sequence", "elements": elements}


def _or(elements: list[Format]) -> Format:
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}
