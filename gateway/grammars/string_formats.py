"""String `format`s: which the grammars enforce, as xgrammar's own grammar or as a pattern of ours.

xgrammar 0.2.9's schema converter enforces `date-time`, `time`, `date`, `duration`, `hostname`, `ipv4`, `ipv6`,
`uuid`, `uri` and `uri-reference` with grammars that write no `<` or `[` (the first characters of the families'
control-token spellings): `XGRAMMAR_FORMATS`. Its `email` (a quoted local part), `json-pointer` and
`relative-json-pointer` grammars can write `<`, and its `uri-template` `[`, so a value could spell a control token:
those are `OWN_PATTERNS` here, bounded patterns whose classes `patterns.narrowed` takes the spellings' first
characters out of (a subset of the format: `email` without a quoted local part). `idn-email` (which xgrammar
ignores) is `email` with non-ASCII letters. Any other format (`idn-hostname`, `iri`, `regex`, `int32`, …) xgrammar
ignores: best effort without strict, a 400 under strict (`unenforced.py`).
"""

from __future__ import annotations

XGRAMMAR_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "hostname", "ipv4", "ipv6", "uuid", "uri", "uri-reference"}
)
"""Formats xgrammar 0.2.9 enforces with a grammar whose only punctuation is none of `<`, `[` (measured: its EBNF)."""
XGRAMMAR_PUNCTUATION = "!#$%&'()*+,-./:;=?@_~"
"""The ASCII punctuation those grammars can write (uri's): a control-token spelling starting with one of these
drops them instead."""

_ATEXT = "A-Za-z0-9!#$%&'*+/=?^_`{|}~\\-"
_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9\\-]{0,61}[A-Za-z0-9])?"
_IDN = "\\u00a0-\\ud7ff\\uf900-\\ufdcf\\ufdf0-\\uffef"
"""RFC 6531's (and RFC 6570's) non-ASCII characters in the Basic Multilingual Plane."""
_POINTER = "(?:/(?:[ !#-.0-\\[\\]-}\\u007f-\\uffff]|~[01])*)*"
"""RFC 6901: reference tokens of any character but `/` (and `~` as `~0`/`~1`), here no control character, `"` or `\\`."""
_URI_LITERAL = "[!#$&(-;=?-\\[\\]_a-z~" + _IDN + "]|%[0-9A-Fa-f]{2}"
_URI_VAR = "(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})"
_URI_VARSPEC = f"{_URI_VAR}(?:\\.?{_URI_VAR})*(?::[1-9][0-9]{{0,3}}|\\*)?"

OWN_PATTERNS = {
    "email": f"^[{_ATEXT}]+(?:\\.[{_ATEXT}]+)*@{_LABEL}(?:\\.{_LABEL})*$",
    "idn-email": f"^[{_ATEXT}{_IDN}]+(?:\\.[{_ATEXT}{_IDN}]+)*@[A-Za-z0-9\\-{_IDN}]+(?:\\.[A-Za-z0-9\\-{_IDN}]+)*$",
    "json-pointer": f"^{_POINTER}$",
    "relative-json-pointer": f"^(?:0|[1-9][0-9]*)(?:#|{_POINTER})$",
    "uri-template": f"^(?:{_URI_LITERAL}|\\{{[+#./;?&=,!@|]?{_URI_VARSPEC}(?:,{_URI_VARSPEC})*\\}})*$",
}
"""Formats enforced as these patterns (RFC 5321/6531, 6901, draft-handrews relative pointers, RFC 6570 level 4)."""

ENFORCED_FORMATS = XGRAMMAR_FORMATS | OWN_PATTERNS.keys()
"""Every format a JSON value's grammar enforces (on a schema whose `type` is `string`)."""


def format_pattern(fmt: str) -> str | None:
    """The pattern of ours that enforces `fmt`, None when xgrammar's grammar does or none does."""
    return OWN_PATTERNS.get(fmt)
