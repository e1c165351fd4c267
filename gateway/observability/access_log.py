"""One JSON line per request on the `gateway.access` logger, and the process's log setup."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.observability.requests import RequestRecord

access_log = logging.getLogger("gateway.access")
LEVELS = ("debug", "info", "warning", "error", "critical")
PROBE_ROUTES = frozenset({"/health", "/ready", "/metrics"})
"""Probes and scrapes log their access lines at debug: a load balancer's checks would drown the requests."""


def access_line(record: RequestRecord, route: str, ended: float) -> bytes:
    """The access line of a finished request: who, what, how it went and how long it took."""
    line = {
        "ts": round(time.time(), 3),
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
        "ttft_ms": None if record.first_token is None else round((record.first_token - record.started) * 1000, 2),
        "latency_ms": round((ended - record.started) * 1000, 2),
    }
    if record.trace_id:
        line["trace_id"] = record.trace_id
    if record.error:
        line["error"] = record.error
    if record.client_closed:
        line["client_closed"] = True
    return orjson.dumps(line)


def log_access(record: RequestRecord, route: str, ended: float) -> None:
    level = logging.DEBUG if route in PROBE_ROUTES and record.status < 400 else logging.INFO
    if access_log.isEnabledFor(level):
        line = access_line(record, route, ended).decode()
        handler = _sole_handler(level)
        if handler is not None:
            handler.write_line(line, level)
        else:  # makeRecord + handle: what Logger.log does, less the caller lookup (a walk up the stack) no line uses
            access_log.handle(_record(line, level))


def _record(line: str, level: int) -> logging.LogRecord:
    return access_log.makeRecord(access_log.name, level, __file__, 0, line, (), None)


class _LineHandler(logging.StreamHandler):
    """Access lines written as they are: what a `%(message)s` formatter writes, without its work per line."""

    def format(self, record: logging.LogRecord) -> str:
        return record.getMessage()

    def write_line(self, line: str, level: int) -> None:
        """What `handle` does with an access record of message `line` (its filter passes every one), no record made."""
        with self.lock:
            try:
                self.stream.write(line + self.terminator)
                self.flush()
            except RecursionError:
                raise
            except Exception:  # noqa: BLE001  (as StreamHandler.emit: a failed write is the handler's to report)
                self.handleError(_record(line, level))


@dataclass(frozen=True)
class _Setup:
    """The loggers as `configure_logging` left them: the root's handlers and each one's filters."""

    root: logging.Logger
    handlers: list[logging.Handler]
    filters: tuple[list[Any], ...]
    lines: _LineHandler


_setup: _Setup | None = None


def _sole_handler(level: int) -> _LineHandler | None:
    """The access handler when, as `configure_logging` set things up, it is the only one an access record at `level`
    reaches (no handler or filter added since, on the access logger, its parents or the root): writing the line to
    it directly is then what logging's own path does, without a LogRecord. None otherwise."""
    setup = _setup
    if setup is None or access_log.filters:
        return None
    logger = access_log
    while logger is not setup.root:
        if logger.handlers or not logger.propagate or logger.parent is None:
            return None
        logger = logger.parent
    handlers = setup.handlers
    if logger.handlers != handlers or setup.lines.level > level:
        return None
    for handler, filters in zip(handlers, setup.filters):
        if handler.filters != filters:
            return None
    return setup.lines


def configure_logging(level: str) -> None:
    """Root logging at `level` to stderr; access lines are bare JSON, other records get a short prefix."""
    plain = logging.StreamHandler(sys.stderr)
    plain.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    plain.addFilter(lambda r: r.name != access_log.name)
    access = _LineHandler(sys.stderr)
    access.addFilter(lambda r: r.name == access_log.name)
    root = logging.getLogger()
    root.handlers[:] = [plain, access]
    root.setLevel(level.upper())
    global _setup
    _setup = _Setup(root, root.handlers[:], tuple(h.filters[:] for h in root.handlers), access)
    # No format here shows a thread, process or multiprocessing name: records need not look them up.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
