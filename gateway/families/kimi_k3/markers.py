"""The control tokens and attribute escaping of Kimi K3's XTML format."""

from __future__ import annotations

OPEN = "<|open|>"
CLOSE = "<|close|>"
SEP = "<|sep|>"
END_OF_MSG = "<|end_of_msg|>"

MARKERS = frozenset({OPEN, CLOSE, SEP})
"""The three structural control tokens; only their token ids are structure, never their spelling."""
SPELLINGS = (OPEN, CLOSE, SEP, END_OF_MSG)
"""Every control token a grammar must keep out of its text regions."""


def escape_attr(value: str) -> str:
    """An attribute value as K3 writes it: `&` → `&amp;`, then `"` → `&quot;`."""
    return value.replace("&", "&amp;").replace('"', "&quot;")


def unescape_attr(value: str) -> str:
    """The inverse of `escape_attr`: `&quot;` → `"`, then `&amp;` → `&`."""
    return value.replace("&quot;", '"').replace("&amp;", "&")
