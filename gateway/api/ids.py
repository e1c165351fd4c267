"""Response ids and creation times."""

from __future__ import annotations

import os
import time


def random_hex() -> str:
    """32 random hex digits (128 bits from the OS), as unguessable as a uuid4 and cheaper to make."""
    return os.urandom(16).hex()


def new_id(prefix: str) -> str:
    return f"{prefix}-{random_hex()}"


def now() -> int:
    return int(time.time())
