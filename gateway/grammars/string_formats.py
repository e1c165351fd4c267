"""String `format`s: which the grammars enforce, as xgrammar's own grammar or as a pattern of ours.

xgrammar 0.2.9's schema converter enforces `duration`, `hostname`, `ipv6`, `uuid`, `uri` and `uri-reference`, with
grammars that write no `<` or `[` (the first characters of the families' control-token spellings):
`XGRAMMAR_FORMATS`. The rest are `OWN_PATTERNS`, bounded patterns whose classes `patterns.narrowed` takes the
spellings' first characters out of, each admitting only valid values (a few valid ones not: `email` with a quoted
local part, a leap second, a pointer with a control character). Measured on 0.2.9: its `date` takes 2024-02-30 and 2023-02-29,
its `time` and `date-time` a second 60 at any minute, its `ipv4` leading zeros (`01.2.3.4`); its `email` (a quoted local part), `json-pointer` and `relative-json-pointer` can write `<`, its
`uri-template` `[`, so a value could spell a control token; it ignores `idn-email`. Any other format
(`idn-hostname`, `iri`, `regex`, `int32`, …) it ignores: best effort without strict, a 400 under strict
(`unenforced.py`).
"""

from __future__ import annotations

import json
from typing import Any

from gateway.grammars.json import SchemaGrammarError

XGRAMMAR_FORMATS = frozenset({"duration", "hostname", "ipv6", "uuid", "uri", "uri-reference"})
"""Formats xgrammar 0.2.9 enforces exactly with a grammar that writes neither `<` nor `[` (measured: its EBNF)."""

_YEAR = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
"""0001-9999 (Python's, and so jsonschema's, dates start at year 1)."""
_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_DATE = (
    f"(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    f"|02-(?:0[1-9]|1[0-9]|2[0-8]))|{_LEAP_YEAR}-02-29)"
)
"""RFC 3339 full-date: each month's days, February's 29th in leap years only."""
_TIME = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:[Zz]|[+\\-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
"""RFC 3339 full-time without the leap second (valid only at 23:59:60 UTC of a day that had one)."""
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_HOST_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9\\-]*[A-Za-z0-9])?"
"""RFC 1123: letters, digits and inner hyphens (its 63 characters at most not counted, as in xgrammar's hostname:
`{0,61}` costs ~160 ms to compile)."""
_ATEXT = "A-Za-z0-9!#$%&'*+/=?^_`{|}~\\-"
_IDN = "\\u00a0-\\ud7ff\\uf900-\\ufdcf\\ufdf0-\\uffef"
"""RFC 6531's (and RFC 6570's) non-ASCII characters in the Basic Multilingual Plane."""
_POINTER = "(?:/(?:[ !#-.0-\\[\\]-}\\u007f-\\uffff]|~[01])*)*"
"""RFC 6901: reference tokens of any character but `/` (and `~` as `~0`/`~1`), here no control character, `"` or `\\`."""
_URI_LITERAL = "[!#$&(-;=?-\\[\\]_a-z~" + _IDN + "]|%[0-9A-Fa-f]{2}"
_URI_VAR = "(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})"
_URI_VARSPEC = f"{_URI_VAR}(?:\\.?{_URI_VAR})*(?::[1-9][0-9]{{0,3}}|\\*)?"

OWN_PATTERNS = {
    "date": f"^{_DATE}$",
    "time": f"^{_TIME}$",
    "date-time": f"^{_DATE}[Tt]{_TIME}$",
    "ipv4": f"^{_OCTET}(?:\\.{_OCTET}){{3}}$",
    "email": f"^[{_ATEXT}]+(?:\\.[{_ATEXT}]+)*@{_HOST_LABEL}(?:\\.{_HOST_LABEL})*$",
    "idn-email": f"^[{_ATEXT}{_IDN}]+(?:\\.[{_ATEXT}{_IDN}]+)*@[A-Za-z0-9\\-{_IDN}]+(?:\\.[A-Za-z0-9\\-{_IDN}]+)*$",
    "json-pointer": f"^{_POINTER}$",
    "relative-json-pointer": f"^(?:0|[1-9][0-9]*)(?:#|{_POINTER})$",
    "uri-template": f"^(?:{_URI_LITERAL}|\\{{[+#./;?&=,!@|]?{_URI_VARSPEC}(?:,{_URI_VARSPEC})*\\}})*$",
}
"""Formats enforced as these patterns (RFC 3339, 2673, 5321/6531, 6901, draft-handrews relative pointers, RFC 6570
level 4); a domain's label and total lengths (63, 253) are not bounded, as in xgrammar's `hostname`."""

_DURATION_TIME = "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
RAW_PATTERNS = OWN_PATTERNS | {
    "uuid": "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$",
    "hostname": f"^{_HOST_LABEL}(?:\\.{_HOST_LABEL})*$",
    "duration": (
        "^P(?:(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)"
        f"(?:{_DURATION_TIME})?|{_DURATION_TIME}|[0-9]+W)$"
    ),
}
"""The patterns of the formats a raw (unquoted) string value enforces (DeepSeek DSML, Kimi K3), where xgrammar's
schema converter is not used: ours, and xgrammar's `uuid`, `hostname`, `duration` written as patterns (RFC 3339
appendix A); `ipv6`, `uri` and `uri-reference` have none."""

ENFORCED_FORMATS = XGRAMMAR_FORMATS | OWN_PATTERNS.keys()
"""Every format a JSON value's grammar enforces (on a schema whose `type` is `string`)."""


def format_pattern(fmt: str) -> str | None:
    """The pattern of ours that enforces `fmt`, None when xgrammar's grammar does or none does."""
    return OWN_PATTERNS.get(fmt)


def raw_string_pattern(schema: Any, param: str = "", strict: bool = False) -> str | None:
    """The pattern a raw string value of `schema` must match: its format's (`RAW_PATTERNS`; the format wins over a
    `pattern` beside it, as in xgrammar's JSON), else its `pattern`; None for neither. Under `strict` a format
    enforced in JSON but with no raw pattern (`ipv6`, `uri`, `uri-reference`) is a SchemaGrammarError naming it."""
    if not isinstance(schema, dict):
        return None
    fmt = schema.get("format")
    own = RAW_PATTERNS.get(fmt) if isinstance(fmt, str) else None
    if strict and own is None and fmt in ENFORCED_FORMATS:
        raise SchemaGrammarError(
            f"a strict schema's format {json.dumps(fmt)} is not enforced on this model's raw string arguments; "
            "use a pattern, or set strict false for best effort",
            f"{param}.format",
        )
    pattern = schema.get("pattern")
    return own or (pattern if isinstance(pattern, str) else None)
