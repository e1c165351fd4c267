"""The audit trail: one JSON line per request, to stdout or a file; never a key."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, TextIO

import orjson


class AuditLog:
    """Appends one JSON object per line and flushes it, so a crash loses nothing written."""

    def __init__(self, path: Path | None = None):
        self._out: TextIO = open(path, "a", encoding="utf-8") if path else sys.stdout  # noqa: SIM115
        self._owned = path is not None
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        line = orjson.dumps(record).decode() + "\n"
        with self._lock:
            self._out.write(line)
            self._out.flush()

    def close(self) -> None:
        if self._owned:
            self._out.close()
