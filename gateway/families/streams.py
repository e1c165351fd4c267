"""Small pieces the families' streaming parsers share: trimmed text streams and call ids."""

from __future__ import annotations

import json
import secrets


def new_call_id() -> str:
    """A fresh OpenAI-style tool call id."""
    return f"call_{secrets.token_hex(12)}"


def json_fragment(text: str) -> str:
    """`text` escaped as the inside of a JSON string (fragments concatenate to the escaped whole)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


class Trimmed:
    """A text stream without leading and trailing whitespace: trailing whitespace waits for more text."""

    def __init__(self) -> None:
        self._started = False
        self._pending = ""

    def push(self, text: str) -> str:
        """What of `text` can be sent now."""
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        body = text.rstrip()
        if not body:
            self._pending += text
            return ""
        out, self._pending = self._pending + body, text[len(body) :]
        return out

    def flush(self) -> str:
        """The trailing whitespace held back so far."""
        out, self._pending = self._pending, ""
        return out
