"""Two processes writing long lines at once, as the processes of a group (`--workers N`) do, never interleave
them: access lines to one pipe (a container's stderr) past PIPE_BUF, audit lines appended to one file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from gateway.observability import whole_lines
from gateway.observability.whole_lines import PIPE_BUF, WholeLines

ROOT = Path(__file__).resolve().parents[2]
LINES, SIZE = 20, 16 * PIPE_BUF  # each line past PIPE_BUF: a pipe keeps none whole by itself
NOTE = b'"why": "the stream had no room (nobody read it)"}'


def _writers(kind: str, path: Path, stderr: int | None = None) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return [
        subprocess.Popen(
            [sys.executable, "-m", "tests.gateway.long_lines_writer", kind, tag, str(LINES), str(SIZE), str(path)],
            cwd=ROOT,
            env=env,
            stderr=stderr,
        )
        for tag in "ab"
    ]


def _check(lines: list[bytes], field: str) -> None:
    assert len(lines) == 2 * LINES
    for line in lines:
        record = json.loads(line)  # two lines mixed are no JSON
        tag = record["request_id"][0]
        assert record[field].strip("/") == tag * SIZE


def test_access_lines_past_pipe_buf_from_two_processes_on_one_pipe_stay_whole(tmp_path):
    read_end, write_end = os.pipe()
    chunks: list[bytes] = []

    def read_slowly() -> bytes:  # a page at a time, with a pause: the pipe fills and a long write waits mid-line
        time.sleep(0.0005)
        return os.read(read_end, PIPE_BUF)

    reader = threading.Thread(target=lambda: chunks.extend(iter(read_slowly, b"")))
    reader.start()
    writers = _writers("access", tmp_path / "lines.lock", stderr=write_end)
    os.close(write_end)
    assert [w.wait(60) for w in writers] == [0, 0]
    reader.join(60)
    os.close(read_end)
    _check(b"".join(chunks).splitlines(), "path")


def test_audit_lines_from_two_processes_appended_to_one_file_stay_whole(tmp_path):
    audit = tmp_path / "audit.jsonl"
    assert [w.wait(60) for w in _writers("audit", audit)] == [0, 0]
    _check(audit.read_bytes().splitlines(), "prompt")


def test_a_stream_without_a_descriptor_gets_the_line_as_text(capsys):
    lines = WholeLines(sys.stderr)  # pytest's capture: no file descriptor
    lines.write(b'{"a": "\xc3\xa9"}\n')
    assert capsys.readouterr().err == '{"a": "é"}\n'


def _drain(read_end: int) -> bytes:
    os.set_blocking(read_end, False)
    chunks = []
    while True:
        try:
            chunk = os.read(read_end, 1 << 16)
        except BlockingIOError:
            return b"".join(chunks)
        chunks.append(chunk)


def test_a_pipe_nobody_reads_drops_lines_instead_of_blocking_the_writer(monkeypatch):
    """A log shipper that stopped: past the pipe's room the writes return (the lines dropped and counted) instead of
    holding the event loop for good; once the pipe has room, a line says how many went, then lines flow again."""
    monkeypatch.setattr(whole_lines, "BLOCKED_AFTER_S", 0.05)
    read_end, write_end = os.pipe()
    lines = WholeLines(os.fdopen(write_end, "wb", buffering=0))
    line = json.dumps({"path": "x" * 300}).encode() + b"\n"
    writer = threading.Thread(target=lambda: [lines.write(line) for _ in range(1000)], daemon=True)
    writer.start()
    writer.join(30)  # a writer blocked for good fails here instead of stalling the suite
    assert not writer.is_alive() and 0 < lines.dropped < 1000
    written = _drain(read_end).splitlines()
    assert set(written) == {line.rstrip()} and len(written) + lines.dropped == 1000
    lines.write(line)
    assert _drain(read_end).splitlines() == [b'{"dropped_lines": %d, ' % lines.dropped + NOTE, line.rstrip()]
    os.close(read_end)
    lines.close()


def test_a_long_line_cut_by_a_pipe_nobody_reads_is_ended_before_the_next(monkeypatch):
    monkeypatch.setattr(whole_lines, "BLOCKED_AFTER_S", 0.05)
    read_end, write_end = os.pipe()
    lines = WholeLines(os.fdopen(write_end, "wb", buffering=0))
    lines.write(b"y" * (1 << 20) + b"\n")  # far past the pipe's room: cut
    assert lines.dropped == 1
    cut = _drain(read_end)
    lines.write(b'{"next": 1}\n')
    assert (cut + _drain(read_end)).split(b"\n")[1:] == [b'{"dropped_lines": 1, ' + NOTE, b'{"next": 1}', b""]
    os.close(read_end)
    lines.close()
