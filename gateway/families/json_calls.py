"""What the JSON tool-call families share: call ids, and a scanner that finds where a streamed JSON value ends."""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

_IN_STRING = re.compile(r'["\\]')
_OUTSIDE = re.compile(r'[{}\[\]"]')


def new_call_id() -> str:
    """A fresh OpenAI-style tool call id."""
    return f"call_{secrets.token_hex(12)}"


class JsonEnd:
    """Finds where one streamed JSON object or array closes, in time linear in the text fed.

    Strings are skipped with a regex (escapes included, also across chunks); only brackets outside
    strings count. Whether the closed value is valid JSON is for `json.loads` to say afterwards.
    """

    def __init__(self) -> None:
        self.depth = 0
        self._in_string = False
        self._escape = False

    def feed(self, text: str) -> int | None:
        """The offset in `text` just past the bracket that closes the value, or None while it is open."""
        at, end = 0, len(text)
        if self._escape and end:
            at, self._escape = 1, False
        while at < end:
            if self._in_string:
                found = _IN_STRING.search(text, at)
                if found is None:
                    return None
                if found.group() == "\\":
                    if found.end() == end:
                        self._escape = True
                        return None
                    at = found.end() + 1
                else:
                    self._in_string, at = False, found.end()
                continue
            found = _OUTSIDE.search(text, at)
            if found is None:
                return None
            at = found.end()
            char = found.group()
            if char == '"':
                self._in_string = True
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
