"""Mistral tool-call ids: 9 alphanumeric characters, the only shape Mistral's chat templates (Nemo, Small 3.x) and
mistral-common accept.

The gateway gives Mistral calls such ids (as vLLM's Mistral tool parser does), and maps the ids of a history's calls
and results to that shape before rendering: the last 9 characters, as vLLM's `truncate_tool_call_ids` cuts them (a
`call_…` or `toolu_…` id ends in 9 hex digits), or, for an id whose last 9 characters are not 9 alphanumerics or that
would take another id's, 9 hex digits of its SHA-256. The same id always maps to the same one within a request, so a
call and its result still match.
"""

from __future__ import annotations

import hashlib
import secrets
import string
from typing import Any

ID_LENGTH = 9
ALPHANUMERIC = string.ascii_letters + string.digits


def new_mistral_call_id() -> str:
    """A fresh call id: 9 random alphanumeric characters (53 bits)."""
    return "".join(secrets.choice(ALPHANUMERIC) for _ in range(ID_LENGTH))


def _fits(text: str) -> bool:
    return len(text) == ID_LENGTH and text.isascii() and text.isalnum()


def _hashed(call_id: str) -> str:
    return hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:ID_LENGTH]


class CallIdMap:
    """Client ids → template ids for one request: distinct ids stay distinct."""

    def __init__(self) -> None:
        self._ids: dict[str, str] = {}
        self._taken: set[str] = set()

    def __call__(self, call_id: str) -> str:
        if call_id not in self._ids:
            short = call_id[-ID_LENGTH:]
            if not _fits(short) or short in self._taken:
                short = _hashed(call_id)
            self._ids[call_id] = short
            self._taken.add(short)
        return self._ids[call_id]


def with_template_call_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with every call's `id` and every tool result's `tool_call_id` in the 9-character shape."""
    ids = CallIdMap()
    out = []
    for message in messages:
        if message.get("tool_calls"):
            message = {**message, "tool_calls": [_with_id(call, ids) for call in message["tool_calls"]]}
        if isinstance(message.get("tool_call_id"), str):
            message = {**message, "tool_call_id": ids(message["tool_call_id"])}
        out.append(message)
    return out


def _with_id(call: dict[str, Any], ids: CallIdMap) -> dict[str, Any]:
    return {**call, "id": ids(call["id"])} if isinstance(call.get("id"), str) else call
