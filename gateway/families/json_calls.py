"""What the JSON tool-call families share: call ids, and a scanner that finds where a streamed JSON value ends."""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

_IN_STRING = {quote: re.compile(rf"[{quote}\\]") for quote in "\"'"}
_OUTSIDE = {quotes: re.compile(rf"[{{}}\[\]{quotes}]") for quotes in ('"', "\"'")}


def new_call_id() -> str:
    """A fresh OpenAI-style tool call id."""
    return f"call_{secrets.token_hex(12)}"


class JsonEnd:
    """Finds where one streamed JSON object or array closes, in time linear in the text fed.

    Strings are skipped with a regex (escapes included, also across chunks); only brackets outside
    strings count. Whether the closed value is valid JSON is for `json.loads` to say afterwards.
    `quotes="\"'"` also skips single-quoted strings (Python literals).
    """

    def __init__(self, quotes: str = '"') -> None:
        self.depth = 0
        self._outside = _OUTSIDE[quotes]
        self._quote: str | None = None
        self._escape = False

    def feed(self, text: str) -> int | None:
        """The offset in `text` just past the bracket that closes the value, or None while it is open."""
        at, end = 0, len(text)
        if self._escape and end:
            at, self._escape = 1, False
        while at < end:
            if self._quote is not None:
                found = _IN_STRING[self._quote].search(text, at)
                if found is None:
                    return None
                if found.group() == "\\":
                    if found.end() == end:
                        self._escape = True
                        return None
                    at = found.end() + 1
                else:
                    self._quote, at = None, found.end()
                continue
            found = self._outside.search(text, at)
            if found is None:
                return None
            at = found.end()
            char = found.group()
            if char in "\"'":
                self._quote = char
            elif char in "{[":
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth <= 0:
                    return at
        return None


def json_object(text: str) -> dict[str, Any] | None:
    """`text` as a JSON object, or None when it is not one (NaN and Infinity are not JSON)."""
    try:
        value = json.loads(text, parse_constant=_reject)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
