"""The ids clients see, from one source of randomness, and creation times."""

from __future__ import annotations

import os
import time


def random_hex(nbytes: int = 16) -> str:
    """`2 * nbytes` random hex digits from the OS (16 bytes: 128 bits, as unguessable as a uuid4 and cheaper to
    make)."""
    return os.urandom(nbytes).hex()


def new_id(prefix: str) -> str:
    """A chat completion or completion id: `chatcmpl-` / `cmpl-` and 32 hex digits."""
    return f"{prefix}-{random_hex()}"


def item_id(prefix: str) -> str:
    """A Responses or Messages id (`resp_`, `msg_`, `fc_`, `rs_` ...) and 32 hex digits."""
    return f"{prefix}_{random_hex()}"


def new_call_id() -> str:
    """A tool call id: `call_` and 24 hex digits."""
    return f"call_{random_hex(12)}"


def tool_use_id() -> str:
    """A Messages tool_use id: `toolu_` (Anthropic's prefix) and 24 hex digits."""
    return f"toolu_{random_hex(12)}"


def now() -> int:
    return int(time.time())
