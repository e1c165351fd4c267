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

from gateway.observability.whole_lines import PIPE_BUF, WholeLines

ROOT = Path(__file__).resolve().parents[2]
LINES, SIZE = 20, 16 * PIPE_BUF  # each line past PIPE_BUF: a pipe keeps none whole by itself


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
