"""A backend stream's event read straight into the fields a client uses (msgspec), where that stands for reading it whole.

`http_backend.stream_event` builds every object of an event (orjson: ~6–9 K instructions an event, then a dict
lookup per field); a typed read builds only the declared fields and skips the rest (an SGLang event's `text`, `id`,
timings). It stands in only where it reads what the whole read would: anything else (None here) is read the general
way, which refuses what it refused before with the same error. Not typed-read: a line that is not `data:`, bytes that
are not UTF-8 (msgspec does not check a skipped string's), JSON msgspec refuses, a field of another type than
declared (a bool or float for an int, an int outside int64 where orjson reads a float), an `error` key, or a nesting
deeper than the interpreter's recursion limit. One difference stays: a number past a double's range (`1e400`) in a
field no client reads is skipped, where orjson refuses the event (JSON allows such a number; no server writes one:
Python's and orjson's encoders write `Infinity` or `null`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import msgspec
import orjson

Int = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
"""An integer field: within int64 (orjson reads integers past uint64 as floats; those go the general way)."""
NO_RAW = msgspec.Raw()
"""A raw field's value when the event does not have it (falsy; a JSON `null` is `Raw(b"null")`, truthy)."""

_DATA = b"data:"
_REFUSED = (msgspec.DecodeError, RecursionError)  # (ValidationError is a DecodeError)


class TypedEvent(msgspec.Struct, gc=False):
    """An event's typed fields (a subclass declares them; keys it does not declare are skipped)."""

    error: msgspec.Raw = NO_RAW
    """An `error` event's error: such an event is always read the general way."""


Event = TypeVar("Event", bound=TypedEvent)


def typed_event(line: bytes, decode: Callable[[bytes], Event]) -> Event | None:
    """The SSE line's event as `decode`'s type (`msgspec.json.Decoder(type).decode`); None where the general read
    (`stream_event`) must read it."""
    if line[:5] != _DATA:
        return None
    data = line[5:]
    if not data.isascii() and not _utf8(data):
        return None
    try:
        event = decode(data)
    except _REFUSED:
        return None
    return None if event.error else event


def raw_value(raw: msgspec.Raw) -> tuple[Any, bool]:
    """A raw field's value as orjson reads it (None where absent), and whether it could (else: the general read)."""
    if not raw:
        return None, True
    try:
        return orjson.loads(bytes(raw)), True
    except orjson.JSONDecodeError:
        return None, False


def _utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True
