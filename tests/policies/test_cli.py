"""`gateway serve` without policies stays on loopback unless told otherwise; policy options are checked
before anything loads."""

from __future__ import annotations

import pytest

from gateway.cli import main


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--host", "0.0.0.0"], "refusing to serve on 0.0.0.0 without --policies"),
        (["--host", "10.1.2.3", "--port", "9"], "--allow-unauthenticated"),
        (["--audit-log", "/tmp/audit.jsonl"], "--audit-log needs --policies"),
        (["--policies", "/nonexistent/policies"], "is not a directory"),
    ],
)
def test_serve_refuses_before_loading(argv, words, capsys):
    assert main(["serve", *argv]) == 2
    assert words in capsys.readouterr().err
