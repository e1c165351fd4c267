"""One JSON line per request on the `gateway.access` logger, and the process's log setup: every line to stderr
whole, one write(2) each (whole_lines.py), so the processes of a group never interleave theirs."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gateway.observability.requests import RequestRecord
from gateway.observability.whole_lines import WholeLines

access_log = logging.getLogger("gateway.access")
LEVELS = ("debug", "info", "warning", "error", "critical")
_round = float.__round__
"""`round` of a float, less the builtin's lookup of `__round__` on its argument's type (half the cost)."""
PROBE_ROUTES = frozenset({"/health", "/ready", "/metrics"})
"""Probes and scrapes log their access lines at debug: a load balancer's checks would drown the requests."""


def access_line(record: RequestRecord, route: str, ended: float) -> bytes:
    """The access line of a finished request: who, what, how it went and how long it took."""
    line = {
        "ts": _round(time.time() * 1000) / 1000,
        "request_id": record.request_id,
        "method": record.method,
        "path": record.path,
        "route": route,
        "status": record.status,
        "model": record.model or None,
        "tenant": record.tenant or None,
        "replica": record.replica or None,
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "cached_tokens": record.cached_tokens,
        "finish_reasons": record.finish_reasons,
        "ttft_ms": None if record.first_token is None else _milliseconds(record.first_token - record.started),
        "latency_ms": _milliseconds(ended - record.started),
    }
    if record.failed_over:
        line["failed_over"] = list(record.failed_over)
    if record.trace_id:
        line["trace_id"] = record.trace_id
    if record.error:
        line["error"] = record.error
    if record.client_closed:
        line["client_closed"] = True
    if record.ignored_fields:
        line["ignored_fields"] = list(record.ignored_fields)
    return orjson.dumps(line)


def _milliseconds(seconds: float) -> float:
    """`seconds` in milliseconds to two places, its hundredths rounded as an integer: four times cheaper than
    `round(x, 2)`, which goes through a decimal string."""
    return _round(seconds * 100_000) / 100


def log_access(record: RequestRecord, route: str, ended: float) -> None:
    level = logging.DEBUG if route in PROBE_ROUTES and record.status < 400 else logging.INFO
    if access_log.isEnabledFor(level):
        line = access_line(record, route, ended)
        handler = _sole_handler(level)
        if handler is not None:
            handler.write_line(line, level)
        else:  # makeRecord + handle: what Logger.log does, less the caller lookup (a walk up the stack) no line uses
            access_log.handle(_record(line.decode(), level))


def _record(line: str, level: int) -> logging.LogRecord:
    return access_log.makeRecord(access_log.name, level, __file__, 0, line, (), None)


class _WholeLineHandler(logging.Handler):
    """Each record formatted, then written whole (one write(2)) through `lines`."""

    def __init__(self, lines: WholeLines) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.write((self.format(record) + "\n").encode("utf-8", "backslashreplace"))
        except Exception:  # noqa: BLE001  (as StreamHandler.emit: a failed write is the handler's to report)
            self._failed(lambda: record)

    def _failed(self, record: Callable[[], logging.LogRecord]) -> None:
        """In an `except` clause: the failure to make or write a line reported through `handleError` with
        `record()`, as StreamHandler.emit reports its own (a RecursionError goes on up)."""
        if isinstance(sys.exc_info()[1], RecursionError):
            raise  # noqa: PLE0704  (re-raises the exception being handled by the caller's except clause)
        self.handleError(record())


class _LineHandler(_WholeLineHandler):
    """Access lines written as they are: what a `%(message)s` formatter writes, without its work per line."""

    def format(self, record: logging.LogRecord) -> str:
        return record.getMessage()

    def write_line(self, line: bytes, level: int) -> None:
        """What `handle` does with an access record of message `line` (its filter passes every one), no record made."""
        try:  # the hot path: no closure made unless the write fails
            self.lines.write(line + b"\n")
        except Exception:  # noqa: BLE001
            self._failed(lambda: _record(line.decode(), level))


@dataclass(frozen=True)
class _Setup:
    """The handlers `configure_logging` made, and what decides where an access record goes (`_routing`) as it
    left it."""

    plain: _WholeLineHandler
    lines: _LineHandler
    routing: tuple[Any, ...]


_setup: _Setup | None = None


def _routing(plain: logging.Handler, lines: logging.Handler) -> tuple[Any, ...]:
    """What decides which handlers an access record reaches, with what filters: the access logger's filters,
    handlers, propagation and parent, the root's handlers, and the filters of the two `configure_logging` made."""
    return (
        access_log.filters,
        access_log.handlers,
        access_log.propagate,
        access_log.parent,
        access_log.root.handlers,
        plain.filters,
        lines.filters,
    )


def _sole_handler(level: int) -> _LineHandler | None:
    """The access handler when, as `configure_logging` set things up, it is the only one an access record at `level`
    reaches (no handler or filter added since on the access logger or the root, no logger between them): writing
    the line to it directly is then what logging's own path does, without a LogRecord. None otherwise."""
    setup = _setup
    if setup is None or setup.lines.level > level or _routing(setup.plain, setup.lines) != setup.routing:
        return None
    return setup.lines


def configure_logging(level: str, group_lock: Path | None = None) -> None:
    """Root logging at `level` to stderr, each line whole (`group_lock`: the lock a group's processes take turns on
    for lines past PIPE_BUF, whole_lines.py); access lines are bare JSON, other records get a short prefix."""
    stderr = WholeLines(sys.stderr, group_lock)
    plain = _WholeLineHandler(stderr)
    plain.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    plain.addFilter(lambda r: r.name != access_log.name)
    access = _LineHandler(stderr)
    access.addFilter(lambda r: r.name == access_log.name)
    root = logging.getLogger()
    root.handlers[:] = [plain, access]
    root.setLevel(level.upper())
    global _setup
    routing = ([], [], True, root, [plain, access], plain.filters[:], access.filters[:])
    _setup = _Setup(plain, access, routing)
    # No format here shows a thread, process or multiprocessing name: records need not look them up.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
