"""Added-token shielding: text a client writes can never become a control token.

Before rendering, every added-token spelling inside client-written strings
(message content, reasoning, names, tool results, tool-call arguments and keys,
tool definitions) is replaced by a marker `@GW<nonce>:<n>@`. The nonce is
random per request and re-drawn until no request string contains its prefix,
so a client who types marker syntax gets plain text back. After rendering, the
encoder cuts only at spellings the template wrote; markers are spelled back
inside the plain-text regions between cuts, which are encoded with no added
token matched.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from gateway.families.base import ChatRequest

_ASSISTANT_KEEP_FIELDS = ("content", "reasoning_content")


@dataclass
class Shield:
    """The markers one request's strings were given, and how to spell them back."""

    prefix: str
    originals: list[str]
    _pattern: re.Pattern[str]

    def restore(self, text: str) -> str:
        """`text` with every marker replaced by the spelling it hides."""
        if not self.originals or self.prefix not in text:
            return text
        return self._pattern.sub(lambda m: self.originals[int(m.group(1))], text)


class Shielder:
    """Replaces added-token spellings in client strings by markers, for one tokenizer."""

    def __init__(self, spellings: Iterable[str]):
        ordered = sorted(set(spellings), key=len, reverse=True)
        self._spelling = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def shield(self, request: ChatRequest, keep_in_assistant: frozenset[str] = frozenset()) -> tuple[ChatRequest, Shield]:
        """A copy of `request` whose client strings spell no added token, and its Shield."""
        prefix = _fresh_prefix(request)
        originals: list[str] = []

        def mark(text: str, keep: frozenset[str] = frozenset()) -> str:
            if self._spelling is None:
                return text

            def one(m: re.Match[str]) -> str:
                if m.group() in keep:
                    return m.group()
                originals.append(m.group())
                return f"{prefix}{len(originals) - 1}@"

            return self._spelling.sub(one, text)

        def deep(value: Any) -> Any:
            if isinstance(value, str):
                return mark(value)
            if isinstance(value, dict):
                return {mark(k) if isinstance(k, str) else k: deep(v) for k, v in value.items()}
            if isinstance(value, list):
                return [deep(v) for v in value]
            return value

        messages = []
        for message in request.messages:
            keep = keep_in_assistant if message.get("role") == "assistant" else frozenset()
            out = {}
            for key, value in message.items():
                if key == "role":
                    out[key] = value
                elif key in _ASSISTANT_KEEP_FIELDS and isinstance(value, str):
                    out[key] = mark(value, keep)
                else:
                    out[key] = deep(value)
            messages.append(out)
        shielded = replace(
            request,
            messages=messages,
            tools=deep(request.tools),
            response_format=deep(request.response_format),
            template_kwargs=deep(request.template_kwargs),
        )
        pattern = re.compile(re.escape(prefix) + r"(\d+)@")
        return shielded, Shield(prefix, originals, pattern)


def _fresh_prefix(request: ChatRequest) -> str:
    """A marker prefix that no string in the request contains."""
    haystack = repr((request.messages, request.tools, request.response_format, request.template_kwargs))
    while True:
        prefix = f"@GW{secrets.token_hex(8)}:"
        if prefix not in haystack:
            return prefix
