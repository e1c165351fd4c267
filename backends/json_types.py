"""JSON value kinds as request validators read them: the one definition of what counts as an integer, a number,
a boolean or a list of token ids, shared by the gateway's validation and the worker's dialects."""

from __future__ import annotations

import math
from typing import Any


def is_integer(value: Any) -> bool:
    """An integer that is not a boolean (JSON `true` is not 1 here)."""
    return isinstance(value, int) and not isinstance(value, bool)


EXACT_FLOAT_INTEGERS = 2**53
"""Every integer up to this magnitude is exactly a float."""


def as_integer(value: Any) -> int | None:
    """An integer as JSON Schema's `integer` reads it: an int or a float with an integral value (1.0 is 1, as
    OpenAI's and vLLM's pydantic servers take it), as an int; None for anything else, booleans included. A float
    past 2^53 is not an exact integer: JSON parsers round integers too long for 64 bits into one (orjson reads
    -2^63 - 1 as -2^63, which would pass an int64 bound)."""
    if is_integer(value):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) <= EXACT_FLOAT_INTEGERS:
        return int(value)
    return None


def as_token_ids(value: Any) -> list[int] | None:
    """A list of token ids (integral floats taken as integers) as ints; None when it is not one."""
    if not isinstance(value, list):
        return None
    ids = [as_integer(i) for i in value]
    return None if None in ids else ids


def is_number(value: Any) -> bool:
    """A finite integer or float that is not a boolean."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_token_ids(value: Any) -> bool:
    """A list of integers (it may be empty)."""
    return isinstance(value, list) and all(is_integer(i) for i in value)
