"""One JSON line per request on the `gateway.access` logger, and the process's log setup."""

from __future__ import annotations

import logging
import sys
import time

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
        # makeRecord + handle: what Logger.log does, less the caller lookup (a walk up the stack) no line uses
        line = access_line(record, route, ended).decode()
        access_log.handle(access_log.makeRecord(access_log.name, level, __file__, 0, line, (), None))


class _LineHandler(logging.StreamHandler):
    """Access lines written as they are: what a `%(message)s` formatter writes, without its work per line."""

    def format(self, record: logging.LogRecord) -> str:
        return record.getMessage()


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
    # No format here shows a thread, process or multiprocessing name: records need not look them up.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
