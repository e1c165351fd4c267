"""Text grammars for K3 argument and response values that can never take a control token.

SGLang and vLLM build xgrammar's vocabulary with `TokenizerInfo.from_huggingface`,
where `<|open|>` and friends are tokens whose text is their spelling (xgrammar
treats only empty-string tokens as special), so any text-level region (JSON, a
regex, `any_text`) accepts the control TOKEN wherever it accepts its spelling:
a JSON string value could carry `<|close|>argument<|sep|><|close|>call<|sep|>…`,
which the token-aware parser reads as structure while the grammar is still
inside the string. The grammars here keep every text region free of the
spellings:

* JSON values are compact one-line JSON (`gateway.grammars.json`, the layout K3
  writes: `", "` and `": "`) whose string content is an xgrammar `TagDispatch`
  that excludes the spellings (a JSON string can still hold them escaped, as
  `\\u003c|open|>`); length-bounded strings take `<` only as an escape.
  `pattern`s that could match `<` and the formats whose grammar can write `<`
  are dropped from the schema; a schema with a literal that spells a control
  token, or a `patternProperties` key pattern that could match `<`, has no
  safe JSON grammar (None).
* Raw string bodies (K3 writes `type="string"` values unquoted, with no escape)
  enforce a `pattern` only when it is anchored (`^…$`), cannot match `<` and is
  cheap enough; a `minLength` is a counted regex prefix, then `any_text`
  excluding the spellings without their leading `<` so that none can straddle
  into it. `maxLength` is not enforced (see grammar.py).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import xgrammar as xgr

from gateway.grammars.json import SchemaGrammarError, compact_json_ebnf

from .markers import SPELLINGS
from .patterns import scan

Format = dict[str, Any]

TAILS = tuple(s[1:] for s in SPELLINGS)
"""The spellings without their leading `<`: text free of these cannot complete a spelling, even after a `<`."""
UNSAFE_FORMATS = frozenset({"email", "idn-email", "json-pointer", "relative-json-pointer"})
"""String formats whose xgrammar 0.2.9 grammar can write `<` (email's quoted local part, JSON pointers)."""
MAX_PATTERN_CHARS = 512
MAX_PATTERN_COUNT = 256
"""Patterns longer than this, or with a larger `{n,m}` bound, are not enforced (compile cost grows with both)."""
MAX_MIN_LENGTH = 64
"""A larger minLength is enforced as this bound (each counted character costs compile time)."""

_SUBSCHEMAS = (
    "items",
    "prefixItems",
    "anyOf",
    "oneOf",
    "allOf",
    "additionalProperties",
    "additionalItems",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
)
"""Keywords whose value is a schema or a list of schemas."""
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_STRING_SUB = re.compile(r"^basic_string_sub ::= .*$", re.MULTILINE)
_BOUNDED_CHARS = re.compile(r'^(\S+_characters) ::= \(\(\[\^\\"\\\\\\r\\n\]\)\)$', re.MULTILINE)
_SAFE_STRING_SUB = (
    'basic_string_sub ::= k3_string_text "\\""\n'
    'k3_string_text ::= TagDispatch(("\\\\", basic_escape), loop_after_dispatch=true, excludes=("\\"", '
    + "".join(f'"\\x{i:02x}", ' for i in range(1, 32))  # NUL cannot be an exclude string; strict JSON rejects it
    + ", ".join(json.dumps(s) for s in SPELLINGS)
    + "))"
)
"""JSON string content (after the opening quote) as a TagDispatch: escapes allowed, the spellings excluded."""


def json_value_ebnf(schema: Any, param: str, strict: bool) -> str | None:
    """Compact JSON matching `schema` with no control-token spelling in any string; None when there is none.

    Raises SchemaGrammarError (with `param`, or the path of the offending pattern) when xgrammar cannot use the
    schema; a pattern it cannot use is dropped instead, unless `strict`.
    """
    return _json_value_ebnf(json.dumps(schema, ensure_ascii=False), param, strict)


@lru_cache(maxsize=1024)
def _json_value_ebnf(schema_json: str, param: str, strict: bool) -> str | None:
    schema = _spell_safe(json.loads(schema_json), param, strict)
    if schema is None:
        return None
    ebnf = compact_json_ebnf(schema, param)
    if any(s in ebnf for s in SPELLINGS) or len(_STRING_SUB.findall(ebnf)) != 1:
        return None  # a literal (property name, enum, const) spells a control token, or xgrammar's rules changed
    ebnf = _STRING_SUB.sub(lambda _: _SAFE_STRING_SUB, ebnf)
    return _BOUNDED_CHARS.sub(lambda m: f'{m.group(1)} ::= ([^\\0-\\x1f\\"\\\\<] | ("\\\\" basic_escape))', ebnf)


def _spell_safe(schema: Any, path: str, strict: bool) -> Any:
    """`schema` without the string keywords whose grammar could write `<`; None when a key pattern could."""
    if isinstance(schema, list):
        items = [_spell_safe(s, f"{path}[{i}]", strict) for i, s in enumerate(schema)]
        return None if any(i is None for i in items) else items
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    pattern = out.get("pattern")
    if isinstance(pattern, str) and (not usable_pattern(pattern, f"{path}.pattern", strict) or may_write_lt(pattern)):
        del out["pattern"]
    if out.get("format") in UNSAFE_FORMATS:
        del out["format"]
    if isinstance(out.get("patternProperties"), dict) and any(map(may_write_lt, out["patternProperties"])):
        return None
    for key in _SUBSCHEMAS:
        if isinstance(out.get(key), (dict, list)):
            out[key] = _spell_safe(out[key], f"{path}.{key}", strict)
            if out[key] is None:
                return None
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            mapped = {k: _spell_safe(v, f"{path}.{key}.{k}", strict) for k, v in out[key].items()}
            if any(v is None for v in mapped.values()):
                return None
            out[key] = mapped
    return out


def usable_pattern(pattern: str, param: str, strict: bool) -> bool:
    """Whether xgrammar's schema converter takes `pattern`; when it does not and `strict`, SchemaGrammarError."""
    try:
        compact_json_ebnf({"type": "string", "pattern": pattern}, param)
    except SchemaGrammarError as exc:
        if strict:
            raise SchemaGrammarError(str(exc).replace("JSON schema", "pattern"), param) from None
        return False
    return True


def may_write_lt(pattern: str) -> bool:
    """Whether a string matching `pattern` may contain `<` (True when the pattern is not understood)."""
    facts = scan(pattern)
    return facts is None or facts.may_match_lt


def pattern_ebnf(pattern: str, param: str, strict: bool) -> str | None:
    """EBNF for a raw string body matching `pattern`, or None when it is not enforced (see the module notes).

    Raises SchemaGrammarError (with `param`) for a pattern xgrammar cannot use, when `strict`.
    """
    if not usable_pattern(pattern, param, strict):
        return None
    facts = scan(pattern)
    if facts is None or not facts.anchored or facts.may_match_lt:
        return None
    if len(pattern) > MAX_PATTERN_CHARS or facts.largest_count > MAX_PATTERN_COUNT:
        return None
    try:
        return _regex_grammar(pattern)
    except (RuntimeError, ValueError):
        return None


@lru_cache(maxsize=1024)
def _regex_grammar(pattern: str) -> str:
    return str(xgr.Grammar.from_regex(pattern))


def min_length_body(min_length: int) -> list[Format]:
    """A raw body of at least `min_length` characters, free of the spellings.

    The first characters before the last counted one cannot be `<`; the counted last one can, and the
    rest excludes `TAILS`, so no spelling starts in the counted part and ends after it.
    """
    counted = min(min_length, MAX_MIN_LENGTH)
    lead = f"[^<]{{{counted - 1}}}" if counted > 1 else ""
    return [{"type": "regex", "pattern": lead + r"[\s\S]"}, {"type": "any_text", "excludes": list(TAILS)}]
