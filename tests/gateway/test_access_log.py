"""The process's log setup: access lines on stderr as bare JSON, every other record with its short prefix."""

from __future__ import annotations

import json
import logging

import pytest

from gateway.observability.access_log import configure_logging, log_access
from gateway.observability.requests import RequestRecord


@pytest.fixture
def own_logging():
    """The test run's root handlers, level and record lookups, back after the test configured the process's own."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    lookups = logging.logThreads, logging.logProcesses, logging.logMultiprocessing
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.logThreads, logging.logProcesses, logging.logMultiprocessing = lookups


def test_access_lines_are_bare_json_and_other_records_keep_their_prefix(own_logging, capsys):
    configure_logging("info")  # here: its handlers write to the stderr the test captures
    record = RequestRecord("POST", "/v1/chat/completions", request_id="r-1", status=200, model="m")
    log_access(record, "/v1/chat/completions", record.started + 0.25)
    logging.getLogger("gateway.test").warning("something %s", "odd")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    line = json.loads(lines[0])
    assert (line["request_id"], line["status"], line["model"], line["latency_ms"]) == ("r-1", 200, "m", 250.0)
    assert lines[0] == json.dumps(line, separators=(",", ":"))  # nothing around the JSON
    assert lines[1].endswith(" WARNING gateway.test: something odd")


def test_probe_routes_log_at_debug(own_logging, capsys):
    configure_logging("info")
    log_access(RequestRecord("GET", "/health", status=200), "/health", 0.0)
    assert capsys.readouterr().err == ""
