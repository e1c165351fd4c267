"""Compact JSON grammars whose strings can never hold a control token's spelling.

SGLang and vLLM build xgrammar's vocabulary with `TokenizerInfo.from_huggingface`,
where control tokens (`<|open|>`, `<｜tool▁call▁end｜>`, …) are tokens whose text
is their spelling (xgrammar treats only empty-string tokens as special), so a
text region (JSON, a regex) accepts the control TOKEN wherever it accepts its
spelling, and a token-aware parser then reads structure inside a value. Here
JSON values are compact one-line JSON (`gateway.grammars.json`: `", "` and
`": "`) whose string content is an xgrammar `TagDispatch` that excludes the
spellings (a JSON string can still hold them escaped, as `\\u003c…`);
length-bounded strings take the spellings' first characters (`<`, and `[` for
Mistral's `[TOOL_CALLS]`…) only as escapes. A `pattern` that could match one of
them is narrowed to one that cannot (`patterns.narrowed`), or dropped where a
literal needs one (a 400 under the client's strict, `exact`) or, best effort, where
narrowing would cost much to compile; most `format`s are patterns of ours
(`string_formats.py`), narrowed the same way. A schema with a literal that spells
a control token, or a `patternProperties` key pattern that could match a first
character, has no safe JSON grammar (None).
Every spelling must start with ASCII punctuation.

The XML argument styles (`qwen_xml`, `glm_xml`: `xml_value_ebnf`) write string values raw, with no escape: a
free raw string is xgrammar's `xml_string` TagDispatch with the whole spellings added to its excludes (so `<b>`
stays writable), a length-bounded one takes no first character at all, and the JSON inside (arrays, objects)
is the spelling-safe JSON above. Around a value that is not a raw string (an enum, a pattern, a number) the
styles allow any whitespace, which a string parameter's parser keeps: it is cut to what the parser drops
(`_tight_values`), so a string literal parses as itself. Between qwen_xml's tags the whitespace and the free names
are bounded (`_bounded_layout`): the qwen3_xml parser reads a value's end only within MAX_TAG_CHARS.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from backends.xgrammar_core import xgrammar
from gateway.grammars.all_of import folded_all_of
from gateway.grammars.claimed_names import claimed_names
from gateway.grammars.counted_arrays import counted_items
from gateway.grammars.counted_classes import (
    _class_ranges,
    _fixed,
    _minus,
    counts_settle,
    inlined_into_quotes,
    json_string_ebnf,
    repeats_natively,
    sequence_writer,
)
from gateway.grammars.ebnf_rules import cheaper_rules, prefixed_rules, shared_text
from gateway.grammars.free_names import FREE_NAME_RULE, distinct_free_names, object_names
from gateway.grammars.json import (
    SUBSCHEMA_KEYS,
    SUBSCHEMA_MAPS,
    SchemaGrammarError,
    compact_json_ebnf,
    xml_arguments_ebnf,
)
from gateway.grammars.json_free_names import marked_free_names, written_free_names
from gateway.grammars.patterns import class_range, narrowed, scan
from gateway.grammars.required import declared_required
from gateway.grammars.string_formats import XGRAMMAR_FORMATS, format_pattern
from gateway.grammars.used_defs import used_definitions

_XGRAMMAR_FORMAT_FIRSTS = frozenset("<[")
"""First characters xgrammar's own format grammars cannot write (string_formats.py); any other drops them."""

_STRING_SUB = re.compile(r"^basic_string_sub ::= .*$", re.MULTILINE)
_PUNCTUATION = re.compile(r"[^\w\s]", re.ASCII)
_BOUNDED_CHARS = re.compile(r'^(\S+_characters) ::= \(\(\[\^\\"\\\\\\r\\n\]\)\)$', re.MULTILINE)
_RAW_BOUNDED_CHARS = re.compile(r"^(\S+_characters) ::= \(\(\[\\0-\\U0010ffff\]\)\)$", re.MULTILINE)
_RAW_BOUNDED_VALUE = re.compile(r"^(\S+) ::= \(\(\1_characters\{(\d+), (\d+)\}\)\)$", re.MULTILINE)
_UNION_VALUE = re.compile(r"^(\S+) ::= \(((?:\(\w+\) \| )+\(\w+\))\)$", re.MULTILINE)
_SPACED_VALUE = re.compile(r'\[ \\n\\r\\t\]\* (\S+) \[ \\n\\r\\t\]\* ("</parameter>"|"</arg_value>")')
_WS = "[ \\n\\r\\t]*"
_VALUE_LEAD = {"qwen_xml": '("" | "\\n") ', "glm_xml": ""}
"""What an XML style's parser strips before a raw value (the newline before its closing tag is the same)."""
_RAW_STRING_EXCLUDES = re.compile(
    r"^(xml_string ::= TagDispatch\(\n  loop_after_dispatch=false,\n  excludes=\()(.*)\)$", re.MULTILINE
)


def _safe_string_sub(spellings: tuple[str, ...]) -> str:
    """JSON string content (after the opening quote) as a TagDispatch: escapes allowed; the spellings and the raw
    control characters U+0000-U+001F excluded (JSON takes those only escaped; xgrammar's own string rule, a class
    `[^\\0-\\x1f…]`, has them out too)."""
    excludes = ['"\\""', *(f'"\\x{i:02x}"' for i in range(32)), *(json.dumps(s) for s in spellings)]
    return (
        'basic_string_sub ::= safe_string_text "\\""\n'
        'safe_string_text ::= TagDispatch(("\\\\", basic_escape), loop_after_dispatch=true, excludes=('
        + ", ".join(excludes)
        + "))"
    )


def json_value_ebnf(
    schema: Any,
    spellings: tuple[str, ...],
    param: str,
    strict: bool,
    in_strings: tuple[str, ...] | None = None,
    exact: bool = False,
) -> str | None:
    """Compact JSON matching `schema` with none of `spellings` (each starting with ASCII punctuation) in any
    string (`in_strings` instead, when given: e.g. their `prefixes`); None when there is none.

    Raises SchemaGrammarError (with `param`, or the path of the offending pattern) when xgrammar cannot use the
    schema; a pattern it cannot use is dropped instead, unless `strict`; a pattern that could write a spelling's
    first character and cannot be narrowed is dropped, unless `exact` (the client's strict).
    """
    _check_firsts(spellings)
    schema_json = json.dumps(unannotated(schema), ensure_ascii=False)
    return _value_ebnf(schema_json, "json", spellings, in_strings or spellings, param, (strict, exact))


def xml_value_ebnf(
    schema: Any, style: str, spellings: tuple[str, ...], param: str, strict: bool, exact: bool = False
) -> str | None:
    """Arguments matching `schema` in xgrammar's XML argument `style` (`qwen_xml`, `glm_xml`) with none of
    `spellings` in a raw value and none of their `prefixes` in a JSON string; None when there is none. Raises as
    `json_value_ebnf`."""
    _check_firsts(spellings)
    schema_json = json.dumps(unannotated(schema), ensure_ascii=False)
    return _value_ebnf(schema_json, style, spellings, prefixes(spellings), param, (strict, exact))


ANNOTATIONS = frozenset(
    {"description", "title", "examples", "$comment", "default", "deprecated", "readOnly", "writeOnly"}
)
"""Keywords that say nothing about which values match (JSON Schema's annotations): xgrammar's grammar ignores them."""


def unannotated(schema: Any) -> Any:
    """`schema` without its `ANNOTATIONS` at any schema position (a property named `description` stays): schemas
    that differ only in them (200 parameters of one `$ref`, each with its own description) convert once."""
    if isinstance(schema, list):
        return [unannotated(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ANNOTATIONS:
            continue
        if key in SUBSCHEMA_KEYS:
            out[key] = unannotated(value)
        elif key in SUBSCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: unannotated(sub) for name, sub in value.items()}
        else:
            out[key] = value
    return out


@lru_cache(maxsize=64)
def _check_firsts(spellings: tuple[str, ...]) -> None:
    """ValueError unless every spelling starts with ASCII punctuation (checked once per tuple: a vocabulary's
    1,000-odd spellings cost ~1 ms a look)."""
    if not all(s[:1].isascii() and _PUNCTUATION.fullmatch(s[:1]) for s in spellings):
        raise ValueError("every excluded spelling must start with ASCII punctuation")


_Strictness = tuple[bool, bool]
"""(refuse a pattern xgrammar cannot use, refuse one that must be dropped to keep control tokens out)."""
_Spellings = tuple[str, ...]


def _value_ebnf(
    schema_json: str, style: str, spellings: _Spellings, in_strings: _Spellings, param: str, strict: _Strictness
) -> str | None:
    """The EBNF of `json_value_ebnf` (style "json") or `xml_value_ebnf`, kept by everything but `param`: equal
    schemas at many places (a tool's 1,000 integer parameters) convert once. `param` only names a refusal, so a
    schema refused is converted again with it."""
    try:
        return _kept_value_ebnf(schema_json, style, spellings, in_strings, strict)
    except SchemaGrammarError:
        return _converted_value_ebnf(schema_json, style, spellings, in_strings, param, strict)


@lru_cache(maxsize=1024)
def _kept_value_ebnf(
    schema_json: str, style: str, spellings: _Spellings, in_strings: _Spellings, strict: _Strictness
) -> str | None:
    return _converted_value_ebnf(schema_json, style, spellings, in_strings, "", strict)


def _converted_value_ebnf(
    schema_json: str, style: str, spellings: _Spellings, in_strings: _Spellings, param: str, strict: _Strictness
) -> str | None:
    firsts = "".join(sorted({s[0] for s in spellings}))
    used = used_definitions(json.loads(schema_json))
    folded = claimed_names(folded_all_of(used, param, exact=strict[1]), param, strict[1])
    folded = declared_required(folded, param, strict[1])
    folded = counted_items(folded)
    schema = _spell_safe(folded, param, *strict, firsts)
    if schema is None or holds_spelling("\0".join(_literals(schema)), spellings):
        return None  # a property name, enum or const value spells a control token
    if style == "json":
        schema, marks = marked_free_names(schema, param, strict[1])
        ebnf, own = written_free_names(compact_json_ebnf(schema, param), marks), ()
    else:
        _check_names(schema, style, param)
        ebnf, own = xml_arguments_ebnf(schema, style, param), _style_markers(style, spellings)
    if holds_spelling(ebnf, tuple(s for s in spellings if s not in own)) or len(_STRING_SUB.findall(ebnf)) != 1:
        return None  # a literal (property name, enum, const) spells a control token, or xgrammar's rules changed
    ebnf = _STRING_SUB.sub(lambda _: _safe_string_sub(in_strings), ebnf)
    bounded = "".join("\\" + c if c in "\\]^-[" else c for c in firsts)
    ebnf = _BOUNDED_CHARS.sub(
        lambda m: f'{m.group(1)} ::= ([^\\0-\\x1f\\"\\\\{bounded}] | ("\\\\" basic_escape))', ebnf
    )
    ebnf = _plain_regexes(ebnf)
    if style == "json":
        return cheaper_rules(ebnf)
    if firsts:
        safe = _raw_values_safe(ebnf, style, spellings, bounded)
        if safe is None:
            return None
        ebnf = safe
    ebnf = _distinct_free_names(_tight_values(ebnf, style), style, schema, param if strict[1] else None)
    return shared_text(cheaper_rules(_bounded_layout(ebnf, style)), *_SHARED_TAGS[style])


_JSON_STRING_REGEX = re.compile(r'^(\S+) ::= Regex\("((?:[^"\\]|\\["\\?\'])*)", json_string=true\)$', re.MULTILINE)
"""A JSON string value's regex rule, its pattern printed with no escape but of a quote, a backslash or `?`."""
_MAY_WRITE_CONTROL = re.compile(r"\\[^dw\W]|\[\^|\.|[\x00-\x1f\x7f]")
"""What in a pattern (its escaped characters taken out, but for letter escapes) may match a control character."""


def _plain_regexes(ebnf: str) -> str:
    """`ebnf` with each `Regex("P", json_string=true)` rule whose pattern cannot match `"`, `\\` or a control
    character written as `Grammar.from_regex(P)`'s EBNF: the same strings (json_string only takes those out), at
    a fraction of the compile cost (xgrammar computes a regex rule's masks state by state: ~9 ms a pattern on
    Qwen3's vocabulary, the EBNF ~0.2 ms), and equal patterns' rules merge. A pattern of classes and literals with a
    long count is written as `counted_classes.json_string_ebnf` (those characters out of its classes, whether it can
    match them or not), inlined between the quotes; one counting past xgrammar's unzipping stays its regex rule."""

    counted: set[str] = set()

    def plain(rule: re.Match[str]) -> str:
        name = rule[1]
        try:
            pattern = re.sub(r"\\(.)", r"\1", rule[2])
            grammar = regex_grammar(pattern)
            if repeats_natively(grammar):
                return rule[0]
            counts = json_string_ebnf(grammar)
            if counts is not None:
                counted.add(name)
                return prefixed_rules(counts, f"{name}_re_").replace(f"{name}_re_root ::=", f"{name} ::=", 1).strip()
            if _may_need_escape(pattern):
                return rule[0]
        except (RuntimeError, ValueError):  # a pattern from_regex refuses
            return rule[0]
        return f"{name} ::= (({name}_re_root))\n" + prefixed_rules(grammar, f"{name}_re_").strip()

    return inlined_into_quotes(_JSON_STRING_REGEX.sub(plain, ebnf), counted)


_VALUE_SPACE = {
    "glm_xml": (('"<arg_value>" ' + _WS, '"<arg_value>"'), (_WS + ' "</arg_value>"', '"</arg_value>"')),
    "qwen_xml": (
        ('">" ' + _WS, '">" ("\\n" | "")'),
        (_WS + ' "</parameter>"', '("\\n" | "") "</parameter>"'),
    ),
}
"""Per XML style, the whitespace xgrammar lets surround a value that is not a raw string (an enum, a pattern, a
number), and what replaces it: what the style's parser drops from a string value (GLM nothing, Qwen one newline
each side), so a string literal parses as itself."""


_SHARED_TAGS = {
    "qwen_xml": (('">" ("\\n" | "")', '("\\n" | "") "</parameter>"'), ("<parameter=",)),
    "glm_xml": (('"</arg_key>" [ \\n\\r\\t]* "<arg_value>"',), ("<arg_key>",)),
}
"""Per XML style, the tag text around each parameter (after `_VALUE_SPACE`) that `shared_text` writes once: the
sequences, and the head of the literal that opens a parameter with its name."""


_LAYOUT_CHARS = 230
"""qwen_xml: a parameter name is shorter than this. The qwen3_xml parser reads a value's end only when
`\n</parameter>`, the whitespace after it and `<parameter=NAME>` come within MAX_TAG_CHARS (256 = 24 + 232)."""
_LAYOUT_SPACE = 8
"""qwen_xml: whitespace between tags, at most (fewer before a literal name of more than `_LAYOUT_CHARS` less this).
xgrammar's compile cost grows with a count: 229 made a 3-parameter tool's 43 ms 329 ms on Qwen3's vocabulary."""
_FREE_NAME = '"<parameter=" xml_variable_name'
_FREE_NAME_CHARS = 64
"""qwen_xml: a name the schema leaves free (`additionalProperties`): at most 64 characters in the grammar (a count
of 200 cost 1.2 s to compile)."""
_NAMED_TAG = re.compile(r'\[ \\n\\r\\t\]\* ("<parameter=((?:[^"\\]|\\.)*)")')
_JSON_RULE = re.compile(r'"[{\[,:]"')


def _bounded_layout(ebnf: str, style: str) -> str:
    """qwen_xml `ebnf` (values already tight) with each run of whitespace between tags bounded, and free names, so
    that the qwen3_xml parser reads every output it takes alike whole and streamed (xgrammar's style lets any run
    through); a JSON value's own whitespace (rules with `{`, `[`, `,` or `:`) stays free."""
    if style != "qwen_xml":
        return ebnf
    if _FREE_NAME in ebnf:  # 1 + 7 + 8 x 7 characters: one count of 63 cost 3x as much to compile (~450 ms)
        ebnf = ebnf.replace(_FREE_NAME, '"<parameter=" [a-zA-Z_] [a-zA-Z0-9_]{0, 7} xml_name_block{0, 7}')
        ebnf += "\nxml_name_block ::= (([a-zA-Z0-9_]{8}))\n"

    def named(tag: re.Match[str]) -> str:
        most = min(_LAYOUT_SPACE, max(1, _LAYOUT_CHARS - len(tag[2])))  # the escaped name: never shorter
        return f"[ \\n\\r\\t]{{0, {most}}} {tag[1]}"

    ebnf = _NAMED_TAG.sub(named, ebnf)
    spaced = f"[ \\n\\r\\t]{{0, {_LAYOUT_SPACE}}}"
    return "\n".join(line if _JSON_RULE.search(line) else line.replace(_WS, spaced) for line in ebnf.split("\n"))


_FREE_NAME_MOST = {"qwen_xml": _FREE_NAME_CHARS, "glm_xml": None}
"""Per XML style, the longest free name or pattern key its grammar writes (GLM's: any, as xgrammar's)."""
_NAME_UNREADABLE = {"qwen_xml": [(0x0A, 0x0A), (0x3E, 0x3E)], "glm_xml": []}
"""Per XML style, characters its parser cannot read back in a pattern key (qwen3_xml's `<parameter=([^>\n]*)>`)."""


def _distinct_free_names(ebnf: str, style: str, schema: Any, strict_param: str | None = None) -> str:
    """`ebnf` of XML `style` whose free names (`additionalProperties`) and pattern keys (`patternProperties`) are
    none of their object's declared names (`free_names.distinct_free_names`): xgrammar's let a free parameter
    repeat a declared one (`n` twice, the last no integer) or write an optional one skipped, its own schema
    unchecked."""
    if FREE_NAME_RULE not in ebnf:  # xgrammar's rules changed (tests catch it)
        return ebnf
    return distinct_free_names(ebnf, schema, _FREE_NAME_MOST[style], _NAME_UNREADABLE[style], strict_param)


_UNWRITABLE_NAME = {
    "qwen_xml": lambda name: ">" in name or "\n" in name or len(name) >= _LAYOUT_CHARS,
    "glm_xml": lambda name: not name or name != name.strip(),
}
"""Per XML style, a parameter name its parser cannot read back: qwen3_xml's reads `<parameter=([^>\n]*)>`, GLM's
strips the key and takes no empty one."""


def _check_names(schema: Any, style: str, param: str) -> None:
    """SchemaGrammarError naming the first parameter `schema` declares (its `anyOf` / `oneOf` branches' too, where
    the keywords beside them were folded, and a `$ref`'s target: `free_names.object_names`) that `style` cannot write
    as itself (`<parameter=a>b>` reads as parameter `a`)."""
    for name in sorted({name for names, _ in object_names(schema).values() for name in names}):
        if _UNWRITABLE_NAME[style](name):
            message = f"the parameter name {json.dumps(name)} cannot be written in this model's call format"
            raise SchemaGrammarError(message, f"{param}.properties" if param else param)


_VALUE_ENDS = {"qwen_xml": ("\n</function>", "\n<parameter=")}
"""Per XML style, text its parser reads as the end of a value even with no closing tag (a model's missing
`</parameter>`), so a raw value may not write it."""


def _tight_values(ebnf: str, style: str) -> str:
    """`ebnf` of XML `style` with around each value only the whitespace its parser drops (`_VALUE_SPACE`)."""
    for loose, tight in _VALUE_SPACE.get(style, ()):
        ebnf = ebnf.replace(loose, tight)
    return ebnf


def _style_markers(style: str, spellings: tuple[str, ...]) -> tuple[str, ...]:
    """The spellings an XML style writes as its own structure (GLM's `<arg_key>`…): not a literal's."""
    bare = xml_arguments_ebnf({"type": "object"}, style, "")
    return tuple(s for s in spellings if s in bare)


def _raw_values_safe(ebnf: str, style: str, spellings: tuple[str, ...], bounded: str) -> str | None:
    """An XML style's EBNF with no spelling in a raw string value: the free one (`xml_string`) excludes them
    whole (and what the style's parser reads as a value's end, `_VALUE_ENDS`), a length-bounded one takes none of
    their first characters and no layout whitespace but what the parser strips (`_tight_bounded_values`); None
    when xgrammar's rules changed."""
    excludes = [*spellings, *_VALUE_ENDS.get(style, ())]
    ebnf, free = _RAW_STRING_EXCLUDES.subn(
        lambda m: m.group(1) + ", ".join([m.group(2), *(json.dumps(s) for s in excludes)]) + ")", ebnf
    )
    ebnf = _RAW_BOUNDED_CHARS.sub(lambda m: f"{m.group(1)} ::= ([^{bounded}])", ebnf)
    return None if free != 1 or "\\U0010ffff" in ebnf else _tight_bounded_values(ebnf, style, bounded)


def _tight_bounded_values(ebnf: str, style: str, bounded: str) -> str:
    """`ebnf` with each length-bounded raw string that is a parameter's whole value written inline as
    `("" | "\\n") c{M,N} "</parameter>"` (qwen_xml) or `c{M,N} "</arg_value>"` (glm_xml), not the style's
    `ws value ws` with the count in its own rule; in a union of rules (`["string", "null"]`, `anyOf`) the bounded
    alternative is written so and each other one with only the whitespace the parser strips around it and its own
    closing tag (as `_tight_values` writes a value that is no union): text with more whitespace is the string's
    (`values.convert`), so `  null` can only be the string, never null written loosely.

    The qwen3_xml parser strips one newline after `<parameter=K>` and one before `</parameter>`, GLM's none, so
    every value read is at most N characters (the style's whitespace left it unbounded); every shorter value stays
    writable, one of N only without its closing newline (one of N ending in a newline not at all). xgrammar
    decides where a count ends cheaply only when the count is inline and followed by one literal that starts with a
    character it excludes: the style's form costs ~1.1 s of CPU to compile for N = 40 on Qwen3's vocabulary,
    growing with N squared, this one ~20 ms for any N (bench/xml_bounded_string_bench.py).

    With a least length M > 0 a qwen3_xml value's characters are no newline (`[^<\\n]{M,N}`): a value of M
    characters that began or ended with one read as M - 1 (the parser strips it), below the schema's minLength.
    Such a value cannot hold a newline (xgrammar decides a count's end cheaply only as above: a count followed by a
    class that excludes the newline compiled in ~0.8 s, 40x).

    A value whose rule is a pattern's classes and literals with a count that costs (`counted_classes.sequence_writer`:
    `^.{1,100}$`, `[a-z]{1,100}`, classes written negated) is inlined the same way: qwen_xml's leading newline
    always, its optional newline before the closing tag as two alternatives, `(s "</parameter>") | (s
    "\\n</parameter>")` (one optional newline between them costs as much as the count in its own rule: ~2.3 s against
    ~30 ms on Qwen3's vocabulary), written so that what the parser reads back is one of s (`_read_as_written`; where s
    ends in a class holding the newline, the second is s with that count full, chunked: ~100 ms). Any other qwen_xml
    value that may write a newline (an enum, a pattern of xgrammar's own rules, `minLength` alone) is written with
    both newlines the parser strips, always: `[^<]+` took `\\n` alone, read as "" (an unbounded count or a recursion
    settles its end cheaply even then: ~10-80 ms, as before).
    """
    lead, tight_close = _VALUE_LEAD[style], _VALUE_SPACE[style][1][1]
    counts = {
        name: _count(name, int(least), most, lead, bounded) for name, least, most in _RAW_BOUNDED_VALUE.findall(ebnf)
    }
    unions = {name: re.findall(r"\((\w+)\)", body) for name, body in _UNION_VALUE.findall(ebnf)}
    sequence, added = lru_cache(maxsize=None)(sequence_writer(ebnf, newline=bool(lead))), {}
    classes = {m[1]: m for m in _CLASS_LINE.finditer(ebnf)}

    bodies = {m[1]: m[2] for m in _RULE_LINE.finditer(ebnf)}

    def written(value: str, spaced: str, close: str) -> str:
        if value in counts:
            return f"{lead}{counts[value]} {close}"
        if (counted := sequence(value)) is not None:
            body, before_newline, rules = counted
            added.update(dict.fromkeys(rules))
            classes.update((m[1], m) for m in map(_CLASS_LINE.match, rules) if m)  # the classes written negated
            if lead:
                return '"\\n" ' + _read_as_written(body, before_newline, close, classes, added)
            return f"({body} {close})"
        alternatives = unions.get(value, ())
        if not any(a in counts or sequence(a) is not None for a in alternatives):
            if lead and _may_write_newline(value, bodies, classes):
                return f'"\\n" {value} "\\n{close[1:]}'  # both newlines the parser strips, always
            return spaced
        return "(" + " | ".join(f"({written(a, f'{lead}{a} {tight_close}', close)})" for a in alternatives) + ")"

    ebnf = _SPACED_VALUE.sub(lambda m: written(m[1], m[0], m[2]), ebnf)
    return "\n".join([ebnf.rstrip("\n"), *added]) + "\n"


_RULE_LINE = re.compile(r"^(\S+) ::= (.*)$", re.MULTILINE)
_RULE_TEXT = re.compile(r'"((?:[^"\\]|\\.)*)"|\[(\^?)((?:[^\]\\]|\\.)*)\]|([A-Za-z_]\w*)')
"""In a rule's body: a literal, a class, or a name (a rule's, or `Regex` / `TagDispatch`)."""
_CLASS_LINE = re.compile(r"^(\w+) ::= \(\(?\[(\^?)((?:[^\]\\]|\\.)*)\]\)\)?$", re.MULTILINE)
_BODY_ITEM = re.compile(r'"[^"\\]*"|(\w+?)(?:_tail_\d+_\d+|\{(\d+), (-?\d+)\})?(?= |$)')
"""An item of a raw value's sequence (`counted_classes.sequence_writer`): a literal (no escape: never a newline), a
class (counted), or a class's chunked tail (`c_tail_0_40`: maybe empty)."""
_NEWLINE = ((0x0A, 0x0A),)


def _read_as_written(
    body: str, before_newline: str | None, close: str, classes: dict[str, re.Match[str]], added: dict[str, None]
) -> str:
    """qwen_xml: a raw value's sequence `body` (after the newline the parser strips first, which the grammar
    makes the value's lead: a value that began with a newline read one short) up to `close`, written so that the
    value the parser reads, one trailing newline dropped, is one `body` matches (`[^<]{1,100}` read `\n` as "").
    A body that cannot end in a newline: itself, then the stripped newline or not. One ending in `c{m, n}`, `c`
    holding the newline, nothing before it ending in one where m = 0: as written (a dropped newline leaves a count
    of `c`), or the full count then the stripped newline (`before_newline`). With m > 0: `c{m-1}` (chunked) then
    `c'` (`c` without the newline), or `c{m+1, n}` (one dropped leaves m), or the full count then the newline.
    Any other is the value then that newline always (exact; its count's end may cost xgrammar a mask per count:
    `c{39} c'` cost ~570 ms to compile on Qwen3's vocabulary, chunked ~80)."""
    closing = f'"\\n{close[1:]}'
    items = list(_BODY_ITEM.finditer(body))
    exact = f"({body} {closing})"
    if " ".join(m[0] for m in items) != body or any(m[1] and m[1] not in classes for m in items):
        return exact
    newline_last = _may_end_in_newline(items, classes)
    if newline_last is None:
        return exact
    if not newline_last:
        return f"(({body} {close}) | ({body} {closing}))"
    last, prefix = items[-1], body[: items[-1].start()]
    if last[2] is None or _may_end_in_newline(items[:-1], classes) is not False and last[2] == "0":
        return exact
    full = f" | ({before_newline} {closing})" if before_newline is not None else ""
    least, most, name = int(last[2]), int(last[3]), last[1]
    if least == 0:
        return f"(({body} {close}){full})"
    rule = classes[name]
    ranges = _class_ranges(rule[3]) or []
    kept = _minus(ranges, _NEWLINE) if not rule[2] else sorted([*ranges, *_NEWLINE])
    other = f"{name}_no_newline"
    added[f"{other} ::= (([{rule[2]}{''.join(class_range(low, high) for low, high in kept)}]))"] = None
    rules: list[str] = []
    shortest = prefix + (_fixed(name, least - 1, rules) + " " if least > 1 else "")
    added.update(dict.fromkeys(rules))
    longer = f" | ({prefix}{name}{{{least + 1}, {most}}} {close})" if most != least else ""
    return f"(({shortest}{other} {close}){longer}{full})"


def _may_write_newline(value: str, bodies: dict[str, str], classes: dict[str, re.Match[str]]) -> bool:
    """Whether the rule `value` (of `bodies`) may write a newline anywhere (a class or literal that holds one, a
    regex or a rule not understood): JSON (`basic_*`) and free strings (`xml_*`, any value reads as a string) aside,
    which never begin or end with one or take any."""
    seen, todo = {value}, [value]
    while todo:
        for literal, negated, members, name in _RULE_TEXT.findall(bodies.get(todo.pop(), "Regex")):
            if name in ("Regex", "TagDispatch") or "\\n" in literal:
                return True
            if members or negated:
                ranges = _class_ranges(members)
                if ranges is None or any(low <= 0x0A <= high for low, high in ranges) != bool(negated):
                    return True
            elif name and name not in seen and not name.startswith(("basic_", "xml_")):
                seen.add(name)
                todo.append(name)
    return False


def _may_end_in_newline(items: list[re.Match[str]], classes: dict[str, re.Match[str]]) -> bool | None:
    """Whether a string of the sequence `items` (`_BODY_ITEM` matches) may end in a newline; None when a class is
    not understood."""
    for item in reversed(items):
        if not item[1]:
            return False  # a literal: never empty, never a newline
        ranges = _class_ranges(classes[item[1]][3])
        if ranges is None:
            return None
        if any(low <= 0x0A <= high for low, high in ranges) != bool(classes[item[1]][2]):
            return True
        if item[0] == item[1] or item[2] and int(item[2]) > 0:
            return False  # a class once, or counted at least once
    return False


def _count(value: str, least: int, most: str, lead: str, bounded: str) -> str:
    """A bounded raw value's characters, counted: with no newline where the style strips one and M > 0."""
    if least and lead:
        return f"[^{bounded}\\n]{{{least}, {most}}}"
    return f"{value}_characters{{{least}, {most}}}"


def _literals(schema: Any) -> list[str]:
    """Every string a grammar for `schema` may write verbatim: property names, `const` and `enum` values."""
    found: list[str] = []
    if isinstance(schema, list):
        for item in schema:
            found += _literals(item)
    elif isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("const", "enum"):
                found += [json.dumps(value, ensure_ascii=False)]
            elif key == "properties" and isinstance(value, dict):
                found += list(value)
            if isinstance(value, (dict, list)) and key not in ("const", "enum"):
                found += _literals(value)
    return found


def _spell_safe(schema: Any, path: str, strict: bool, exact: bool, firsts: str) -> Any:
    """`schema` with no string keyword whose grammar could write one of `firsts`: a pattern narrowed, or dropped
    (under `exact` a SchemaGrammarError naming it); None when a key pattern could. `strict`: a pattern xgrammar
    cannot use is a SchemaGrammarError too."""
    if isinstance(schema, list):
        items = [_spell_safe(s, f"{path}[{i}]", strict, exact, firsts) for i, s in enumerate(schema)]
        return None if any(i is None for i in items) else items
    if not isinstance(schema, dict):
        return schema
    out = _own_format(dict(schema), firsts)
    pattern = out.get("pattern")
    if isinstance(pattern, str):
        safe = pattern if usable_pattern(pattern, f"{path}.pattern", strict, json_string=True) else None
        if safe is not None and may_write(safe, firsts):
            safe = narrowed(safe, firsts) if exact else _narrowed_if_cheap(safe, firsts)
            safe = safe if safe is not None and usable_pattern(safe, "", False, json_string=True) else None
        if safe is None and exact:
            raise SchemaGrammarError(
                _UNSAFE_PATTERN.format(json.dumps("".join(sorted(set(firsts))))), f"{path}.pattern"
            )
        if safe is None:
            del out["pattern"]
        else:
            out["pattern"] = safe
    if isinstance(out.get("patternProperties"), dict) and any(may_write(k, firsts) for k in out["patternProperties"]):
        return None
    for key in SUBSCHEMA_KEYS:
        if isinstance(out.get(key), (dict, list)):
            out[key] = _spell_safe(out[key], f"{path}.{key}", strict, exact, firsts)
            if out[key] is None:
                return None
    for key in SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            mapped = {k: _spell_safe(v, f"{path}.{key}.{k}", strict, exact, firsts) for k, v in out[key].items()}
            if any(v is None for v in mapped.values()):
                return None
            out[key] = mapped
    return out


_UNSAFE_PATTERN = (
    "the pattern cannot be enforced: a string it matches may need one of the characters {} that this model's "
    "control tokens start with, which a value writes only escaped; exclude them (e.g. [^<] for .), or set strict "
    "false for best effort"
)


_NARROWED_COUNT = 4
"""A narrowed pattern's class makes it a `json_string` regex, whose counted repetitions cost compile time
(`^.{1,100}$` ~1.5 s on Qwen3's vocabulary, `^\\S{1,12}$` ~0.1 s: bench/RESULTS.md): best effort drops a pattern
counting past this rather than narrow it (the formats' own counts are below it), unless it is written as plain EBNF
(`_narrowed_if_cheap`: JSON and XML values; Gemma 4's regex formats are not); strict narrows it whatever the cost
(the compile budget bounds it)."""


def cheaply_narrowed(pattern: str, firsts: str) -> str | None:
    """`patterns.narrowed(pattern, firsts)` unless the pattern counts past `_NARROWED_COUNT` (then None)."""
    facts = scan(pattern)
    return None if facts is None or facts.largest_count > _NARROWED_COUNT else narrowed(pattern, firsts)


def _narrowed_if_cheap(pattern: str, firsts: str) -> str | None:
    """`cheaply_narrowed`, or the narrowed pattern where it counts more but is classes and literals counted at most
    `counted_classes`' unzipping: a JSON string writes it as plain EBNF up to its closing quote, a raw XML value
    up to its closing tag (`^.{1,100}$` ~20-40 ms of compile on Qwen3's vocabulary, not ~1.5-2.5 s), where what
    follows each broad count ends it (`counts_settle`: not `^.{1,100}x$`)."""
    cheap = cheaply_narrowed(pattern, firsts)
    if cheap is not None:
        return cheap
    safe = narrowed(pattern, firsts)
    try:
        grammar = regex_grammar(safe) if safe is not None else ""
    except (RuntimeError, ValueError):  # a pattern from_regex refuses
        return None
    if not grammar or repeats_natively(grammar):
        return None
    return safe if json_string_ebnf(grammar) is not None and counts_settle(grammar, "\n<") else None


def _own_format(schema: dict[str, Any], firsts: str) -> dict[str, Any]:
    """`schema` with a `format` enforced by a pattern of ours (string_formats.py) as that pattern (the format wins
    over a `pattern` beside it, as in xgrammar), and an xgrammar format dropped where a first character is one its
    grammar could write."""
    fmt = schema.get("format")
    if not isinstance(fmt, str):
        return schema
    own = format_pattern(fmt)
    if own is not None:
        del schema["format"]
        schema["pattern"] = own
    elif fmt in XGRAMMAR_FORMATS and not _XGRAMMAR_FORMAT_FIRSTS.issuperset(firsts):
        del schema["format"]
    return schema


def usable_pattern(pattern: str, param: str, strict: bool, json_string: bool = False) -> bool:
    """Whether xgrammar's schema converter takes `pattern` (for a JSON string value with `json_string`: and writes
    it escaped); when it does not and `strict`, SchemaGrammarError."""
    try:
        ebnf = compact_json_ebnf({"type": "string", "pattern": pattern}, param)
        if json_string and "Regex(" not in ebnf and _may_need_escape(pattern):
            # xgrammar 0.2.9 writes a pattern it reads as plain text (`^a"b$`, `^a\nb$`) as EBNF literals, the
            # quote, backslash or control character raw inside the JSON string: `"a"b"` is no JSON
            raise SchemaGrammarError("the pattern cannot be enforced: its quote, backslash or control character", param)
    except SchemaGrammarError as exc:
        if strict:
            raise SchemaGrammarError(str(exc).replace("JSON schema", "pattern"), param) from None
        return False
    return True


def _may_need_escape(pattern: str) -> bool:
    """Whether a string matching `pattern` may hold `"`, `\\` or a control character (JSON writes them escaped)."""
    facts = scan(pattern, '"\\')
    return facts is None or facts.may_match or bool(_MAY_WRITE_CONTROL.search(re.sub(r"\\[^A-Za-z0-9]", "", pattern)))


MAX_PATTERN_CHARS = 512
MAX_PATTERN_COUNT = 256
"""Raw-string patterns longer than this, or with a larger `{n,m}` bound, are not enforced (compile cost grows with
both)."""


def raw_pattern_ebnf(pattern: str, param: str, strict: bool) -> str | None:
    """EBNF for a raw (unquoted, unescaped) string value matching `pattern`, or None when it is not enforced: only
    an anchored (`^…$`), cheap pattern that cannot match `<` (the first character of every control-token spelling
    that a raw value must not hold), or that `patterns.narrowed` rewrites into one that cannot, is.

    Raises SchemaGrammarError (with `param`) for a pattern xgrammar cannot use, when `strict`.
    """
    if not usable_pattern(pattern, param, strict):
        return None
    facts = scan(pattern)
    if facts is not None and facts.may_match:
        pattern = narrowed(pattern) or pattern
        facts = scan(pattern)
    if facts is None or not facts.anchored or facts.may_match:
        return None
    if len(pattern) > MAX_PATTERN_CHARS or facts.largest_count > MAX_PATTERN_COUNT:
        return None
    try:
        return regex_grammar(pattern)
    except (RuntimeError, ValueError):
        return None


@lru_cache(maxsize=1024)
def regex_grammar(pattern: str) -> str:
    """xgrammar's EBNF for a regex (kept: the JSON values here and the structural tags' regex formats share it)."""
    return str(xgrammar().Grammar.from_regex(pattern))


def may_write(pattern: str, chars: str = "<") -> bool:
    """Whether a string matching `pattern` may contain one of `chars` (True when the pattern is not understood)."""
    if not chars:
        return False
    facts = scan(pattern, chars)
    return facts is None or facts.may_match


_ANY_OBJECT: dict[str, Any] = {"type": "object"}
EXCLUDED_CHARS = 5
"""A vocabulary's spelling is excluded by its first characters: `<|eot`, `[TOOL`, `<|res` (every reserved token);
a string holding those is excluded too (it can still be written escaped). xgrammar's compile time grows with the
excluded characters: whole spellings cost 3-5x (bench/family_grammar_bench.py)."""


def prefixes(spellings: tuple[str, ...]) -> tuple[str, ...]:
    """The first EXCLUDED_CHARS of each spelling: what a JSON string excludes (it can write the rest escaped)."""
    return tuple(sorted({s[:EXCLUDED_CHARS] for s in spellings}))


def holds_spelling(text: str, spellings: tuple[str, ...]) -> bool:
    """Whether `text` holds one of `spellings` whole (a literal that only begins like one, `"[TOOL"`, does not):
    each of their `prefixes` found, then the spellings behind it looked up by length, so a vocabulary's 1,000
    reserved spellings (`<SPECIAL_12>`…) cost a few scans of `text`, not 1,000."""
    for prefix, lengths, whole in _by_prefix(spellings):
        at = text.find(prefix)
        while at >= 0:
            if any(text[at : at + n] in whole for n in lengths):
                return True
            at = text.find(prefix, at + 1)
    return False


@lru_cache(maxsize=64)
def _by_prefix(spellings: tuple[str, ...]) -> tuple[tuple[str, tuple[int, ...], frozenset[str]], ...]:
    """`spellings` grouped by their `prefixes`: each prefix, the lengths of its spellings, and the spellings."""
    groups: dict[str, set[str]] = {}
    for spelling in spellings:
        groups.setdefault(spelling[:EXCLUDED_CHARS], set()).add(spelling)
    return tuple((p, tuple(sorted({len(s) for s in g})), frozenset(g)) for p, g in groups.items())


@lru_cache(maxsize=16)
def added_spellings(tokenizer: Any, markers: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The whole spellings of `tokenizer`'s special added tokens that start with ASCII punctuation (every one in
    the families' vocabularies), and `markers` (a family's own, special or not)."""
    specials = (t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special)
    return tuple(sorted({s for s in specials if _PUNCTUATION.match(s)} | markers))


@lru_cache(maxsize=16)
def special_ids(tokenizer: Any) -> frozenset[int]:
    """The ids of `tokenizer`'s special added tokens (control, stop and unused ones): what free text excludes."""
    return frozenset(i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special)


def control_spellings(tokenizer: Any) -> tuple[str, ...]:
    """What JSON strings must not contain on `tokenizer` (a `tokenizers.Tokenizer`): the `prefixes` of its
    `added_spellings`."""
    return prefixes(added_spellings(tokenizer))


def safe_json_format(
    schema: Any, spellings: tuple[str, ...], param: str, strict: bool, in_strings: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """A structural-tag `grammar` format for compact JSON matching `schema` with no spelling in a string
    (`in_strings` instead, when given: e.g. their `prefixes`; a literal is checked for the whole `spellings`). A
    schema without such a grammar is a SchemaGrammarError (a 400 naming `param`) when the client asked for
    `strict`, else any JSON object (seed 001: an omitted `strict` enforces what can be enforced)."""
    return {"type": "grammar", "grammar": safe_json_ebnf(schema, spellings, param, strict, in_strings)}


def safe_json_ebnf(
    schema: Any, spellings: tuple[str, ...], param: str, strict: bool, in_strings: tuple[str, ...] | None = None
) -> str:
    """The EBNF of `safe_json_format`."""
    return _or_any_object(
        lambda s, st: json_value_ebnf(s, spellings, param, st, in_strings, exact=strict), schema, param, strict, strict
    )


def safe_arguments_ebnf(schema: Any, spellings: tuple[str, ...], param: str, strict: bool, style: str = "json") -> str:
    """Arguments matching `schema` in `style` (compact JSON with the `prefixes` of `spellings` out of its strings,
    or an XML style: `xml_value_ebnf`), for the tag-shaped families whose omitted `strict` is strict: a schema or
    pattern xgrammar cannot use is a SchemaGrammarError whatever `strict`; a schema with no such grammar is one
    when `strict`, else any object."""

    def convert(s: Any, st: bool) -> str | None:
        if style == "json":
            return json_value_ebnf(s, spellings, param, st, in_strings=prefixes(spellings), exact=strict)
        return xml_value_ebnf(s, style, spellings, param, st, exact=strict)

    return _or_any_object(convert, schema, param, strict, refuse_unusable=True)


def _or_any_object(
    convert: Callable[[Any, bool], str | None], schema: Any, param: str, strict: bool, refuse_unusable: bool
) -> str:
    """`convert(schema, refuse_unusable)`; where it has no grammar, or cannot use the schema and not
    `refuse_unusable`, a SchemaGrammarError when `strict`, else `convert` of any object."""
    try:
        ebnf = convert(schema, refuse_unusable)
    except SchemaGrammarError:
        if refuse_unusable:
            raise
        ebnf = None
    if ebnf is None and not strict:
        ebnf = convert(_ANY_OBJECT, False)
    if ebnf is None:  # under strict; or any object has none either (xgrammar's rules changed): a 400, never a 500
        raise SchemaGrammarError("the JSON schema cannot be enforced without control-token text", param)
    return ebnf
