"""The W3C trace context of the request being served, forwarded to backends as the `traceparent` header.

The gateway sets it per request (a context variable, so concurrent requests never mix); backends/ only reads it.
"""

from __future__ import annotations

import re
from contextvars import ContextVar

TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
"""Version 00 of https://www.w3.org/TR/trace-context/#traceparent-header (all-zero ids are invalid)."""

current_traceparent: ContextVar[str | None] = ContextVar("traceparent", default=None)


def valid_traceparent(value: str) -> bool:
    return TRACEPARENT.fullmatch(value) is not None
