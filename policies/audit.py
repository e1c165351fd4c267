"""The audit trail: one JSON line per request, to stdout or a file; never a key."""

from __future__ import annotations

from typing import Any, Protocol

import orjson


class LineSink(Protocol):
    """Where lines go, each written whole (gateway/observability/whole_lines.py)."""

    def write(self, line: bytes) -> None: ...

    def close(self) -> None: ...


class AuditLog:
    """One JSON object per line, each written to `out` at once and whole: a crash loses nothing written, and the
    processes of a group (`--workers N`) sharing the file or stdout never interleave their lines."""

    def __init__(self, out: LineSink):
        self._out = out

    def write(self, record: dict[str, Any]) -> None:
        self._out.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))

    def close(self) -> None:
        self._out.close()
