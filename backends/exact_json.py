"""JSON as orjson parses it, except that an integer past 64 bits (which orjson turns into a float, changing its
value) is refused, naming its place, rather than changed."""

from __future__ import annotations

import json
from typing import Any

import orjson

_LOW, _HIGH = -(1 << 63), (1 << 64) - 1
"""The integers orjson holds exactly (int64's and uint64's)."""
_DIGIT_MARKS = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))
"""Each byte as "1" when it is a digit, else "0": a run of digits becomes one of "1"s (found by bytes.find, in C)."""
_LONG_RUN = b"1" * 19
"""An integer past 64 bits has 19 digits at least: a document without such a run has none (most: one search)."""


class WideInteger(ValueError):
    """An integer past 64 bits; `place` is its path in the document (`a.b[2]`; "" for the document itself)."""

    def __init__(self, place: str):
        super().__init__(f"an integer past 64 bits at {place or 'the top'}")
        self.place = place


def loads(data: bytes | bytearray | str) -> Any:
    """`data` parsed by orjson (orjson.JSONDecodeError when it is not JSON); WideInteger for an integer past 64 bits."""
    value = orjson.loads(data)
    raw = data.encode() if isinstance(data, str) else data
    if _LONG_RUN not in raw.translate(_DIGIT_MARKS) or _first(value, _widened) is None:
        return value
    try:
        exact = json.loads(data)
    except RecursionError:  # nested past the stdlib parser's depth: the float orjson made stands for the integer
        raise WideInteger(_first(value, _widened) or "") from None
    place = _first(exact, _wide)
    if place is not None:
        raise WideInteger(place)
    return value  # its large floats were written as floats


def _widened(v: Any) -> bool:
    """Whether `v` may be orjson's float for an integer past 64 bits."""
    return type(v) is float and v.is_integer() and abs(v) >= 1 << 63


def _wide(v: Any) -> bool:
    return type(v) is int and not _LOW <= v <= _HIGH


def _first(document: Any, match: Any) -> str | None:
    """The path of the first value in `document` that `match`es (document order), or None."""
    stack: list[tuple[Any, str]] = [(document, "")]
    while stack:
        v, place = stack.pop()
        if match(v):
            return place
        if isinstance(v, dict):
            stack.extend((item, f"{place}.{key}" if place else str(key)) for key, item in reversed(v.items()))
        elif isinstance(v, list):
            stack.extend((item, f"{place}[{i}]") for i, item in reversed(list(enumerate(v))))
    return None
