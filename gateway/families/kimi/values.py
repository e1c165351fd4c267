"""Text grammars for K3 argument and response values that can never take a control token.

JSON values are `gateway.grammars.safe_json` with K3's spellings excluded.
Raw string bodies (K3 writes `type="string"` values unquoted, with no escape)
enforce a `pattern` only when it is anchored (`^…$`), cannot match `<` and is
cheap enough (`safe_json.raw_pattern_ebnf`); a `minLength` is a counted regex prefix, then `any_text`
excluding the spellings without their leading `<` so that none can straddle
into it. A `maxLength` is enforced only up to `grammar.MAX_SETTLED_LENGTH` (see grammar.py).
"""

from __future__ import annotations

from typing import Any

from gateway.grammars import safe_json

from .markers import SPELLINGS

Format = dict[str, Any]

TAILS = tuple(s[1:] for s in SPELLINGS)
"""The spellings without their leading `<`: text free of these cannot complete a spelling, even after a `<`."""
MAX_MIN_LENGTH = 64
"""A larger minLength is enforced as this bound (each counted character costs compile time)."""


def json_value_ebnf(schema: Any, param: str, strict: bool) -> str | None:
    """Compact JSON matching `schema` with no K3 control-token spelling in any string (see safe_json)."""
    return safe_json.json_value_ebnf(schema, SPELLINGS, param, strict, exact=strict)


def min_length_body(min_length: int) -> list[Format]:
    """A raw body of at least `min_length` characters, free of the spellings.

    The first characters before the last counted one cannot be `<`; the counted last one can, and the
    rest excludes `TAILS`, so no spelling starts in the counted part and ends after it.
    """
    counted = min(min_length, MAX_MIN_LENGTH)
    lead = f"[^<]{{{counted - 1}}}" if counted > 1 else ""
    return [{"type": "regex", "pattern": lead + r"[\s\S]"}, {"type": "any_text", "excludes": list(TAILS)}]
