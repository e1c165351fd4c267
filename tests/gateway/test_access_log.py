"""The process's log setup: access lines on stderr as bare JSON, every other record with its short prefix."""

from __future__ import annotations

import json
import logging

import pytest

from gateway.observability.access_log import access_line, configure_logging, log_access
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


class _Kept(logging.Handler):
    """Keeps the records it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _access_line_written(capsys) -> str:
    record = RequestRecord("POST", "/v1/chat/completions", request_id="r-2", status=200, model="m")
    log_access(record, "/v1/chat/completions", record.started + 0.5)
    return capsys.readouterr().err


def test_handlers_and_filters_added_after_the_setup_see_every_access_line(own_logging, capsys):
    """The setup's handler is written to directly only while it alone would get the line: a handler added to the
    root or the access logger gets its record too, and a filter on the access logger still drops it."""
    configure_logging("info")
    kept = _Kept()
    for logger in (logging.getLogger(), logging.getLogger("gateway.access")):
        logger.addHandler(kept)
        try:
            assert len(_access_line_written(capsys).splitlines()) == 1  # the setup's handler still writes it
        finally:
            logger.removeHandler(kept)
    assert [json.loads(r.getMessage())["request_id"] for r in kept.records] == ["r-2", "r-2"]
    access = logging.getLogger("gateway.access")
    access.addFilter(lambda r: False)
    try:
        assert _access_line_written(capsys) == ""
    finally:
        access.filters.clear()
    assert _access_line_written(capsys) != ""


def test_a_filter_on_the_setups_access_handler_or_no_propagation_leaves_the_line_to_logging(own_logging, capsys):
    """The direct write also stops once the setup's own access handler gets a filter, or the access logger stops
    propagating to the root: logging's path then drops the line, as it would without the direct write."""
    configure_logging("info")
    _, lines = logging.getLogger().handlers
    lines.addFilter(lambda r: False)
    try:
        assert _access_line_written(capsys) == ""
    finally:
        lines.filters.pop()
    access = logging.getLogger("gateway.access")
    access.propagate = False
    try:
        assert _access_line_written(capsys) == ""
    finally:
        access.propagate = True
    assert _access_line_written(capsys) != ""


def test_the_direct_write_is_what_logging_writes(own_logging, capsys):
    """The line written without a LogRecord and the one logging's own path writes (a handler of the access logger
    that takes nothing forces that path) are the same bytes, latency aside."""
    configure_logging("info")
    direct = json.loads(_access_line_written(capsys))
    access = logging.getLogger("gateway.access")
    idle = logging.NullHandler()
    access.addHandler(idle)
    try:
        through_logging = json.loads(_access_line_written(capsys))
    finally:
        access.removeHandler(idle)
    direct.pop("ts"), through_logging.pop("ts")
    assert direct == through_logging


def test_an_access_line_makes_no_log_record_under_the_process_setup(own_logging, capsys):
    """Under `configure_logging` alone an access line is written without a LogRecord (the per-request cost of
    logging's path: the record's ~20 fields, the handler chain's calls)."""
    configure_logging("info")
    made = []
    factory = logging.getLogRecordFactory()

    def counting(*args, **kwargs):
        made.append(args[0])
        return factory(*args, **kwargs)

    logging.setLogRecordFactory(counting)
    try:
        assert _access_line_written(capsys).endswith("}\n")
    finally:
        logging.setLogRecordFactory(factory)
    assert made == []


@pytest.mark.parametrize("elapsed", [0.0, 0.000004, 0.0123456, 1.005, 2.675, 123.456789])
def test_access_line_times_are_milliseconds_to_two_places(elapsed: float) -> None:
    record = RequestRecord("POST", "/v1/chat/completions", status=200, started=10.0)
    record.first_token = 10.0 + elapsed / 2
    line = json.loads(access_line(record, "/v1/chat/completions", 10.0 + elapsed))
    for key, seconds in (("latency_ms", elapsed), ("ttft_ms", elapsed / 2)):
        assert abs(line[key] - seconds * 1000) <= 0.005 + 1e-9
        assert len(json.dumps(line[key]).partition(".")[2]) <= 2
    assert len(json.dumps(line["ts"]).partition(".")[2]) <= 3


class _BrokenLines:
    """A `WholeLines` whose writes fail with `error`."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def write(self, data: bytes) -> None:
        raise self.error


def test_a_failed_write_is_the_handlers_to_report_and_a_recursion_error_goes_up(own_logging, monkeypatch):
    """As StreamHandler.emit: a write that fails goes to `handleError` with the record (the direct access write makes
    one then, holding the line); a RecursionError is raised on."""
    configure_logging("info")
    plain, access = logging.getLogger().handlers
    reported: list[str] = []
    for handler in (plain, access):
        monkeypatch.setattr(handler, "handleError", lambda record: reported.append(record.getMessage()))
        handler.lines = _BrokenLines(OSError("gone"))
    record = RequestRecord("POST", "/v1/chat/completions", request_id="r-9", status=200)
    log_access(record, "/v1/chat/completions", record.started)
    logging.getLogger("gateway.test").warning("lost %s", "line")
    assert len(reported) == 2 and json.loads(reported[0])["request_id"] == "r-9" and reported[1] == "lost line"
    for handler in (plain, access):
        handler.lines = _BrokenLines(RecursionError())
    with pytest.raises(RecursionError):
        log_access(record, "/v1/chat/completions", record.started)
    with pytest.raises(RecursionError):
        logging.getLogger("gateway.test").warning("deep")
