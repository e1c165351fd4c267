"""Text grammars for K3 argument and response values that can never take a control token.

JSON values are `gateway.grammars.safe_json` with K3's spellings excluded.
Raw string bodies (K3 writes `type="string"` values unquoted, with no escape)
enforce a `pattern` only when it is anchored (`^…$`), cannot match `<` and is
cheap enough; a `minLength` is a counted regex prefix, then `any_text`
excluding the spellings without their leading `<` so that none can straddle
into it. `maxLength` is not enforced (see grammar.py).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import xgrammar as xgr

from gateway.grammars import safe_json
from gateway.grammars.patterns import scan
from gateway.grammars.safe_json import usable_pattern

from .markers import SPELLINGS

Format = dict[str, Any]

TAILS = tuple(s[1:] for s in SPELLINGS)
"""The spellings without their leading `<`: text free of these cannot complete a spelling, even after a `<`."""
MAX_PATTERN_CHARS = 512
MAX_PATTERN_COUNT = 256
"""Patterns longer than this, or with a larger `{n,m}` bound, are not enforced (compile cost grows with both)."""
MAX_MIN_LENGTH = 64
"""A larger minLength is enforced as this bound (each counted character costs compile time)."""


def json_value_ebnf(schema: Any, param: str, strict: bool) -> str | None:
    """Compact JSON matching `schema` with no K3 control-token spelling in any string (see safe_json)."""
    return safe_json.json_value_ebnf(schema, SPELLINGS, param, strict)


def pattern_ebnf(pattern: str, param: str, strict: bool) -> str | None:
    """EBNF for a raw string body matching `pattern`, or None when it is not enforced (see the module notes).

    Raises SchemaGrammarError (with `param`) for a pattern xgrammar cannot use, when `strict`.
    """
    if not usable_pattern(pattern, param, strict):
        return None
    facts = scan(pattern)
    if facts is None or not facts.anchored or facts.may_match:
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
