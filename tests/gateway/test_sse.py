"""SSE framing: one `data:` line per event, a blank line after each, and the [DONE] sentinel."""

from __future__ import annotations

import json

from gateway.api.sse import DONE, event


def test_event_is_one_data_line():
    raw = event({"text": "line one\nline two", "emoji": "😀"})
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n")
    assert raw.count(b"\n") == 2, "newlines inside values are escaped by JSON, never raw"
    assert json.loads(raw[len(b"data: ") :]) == {"text": "line one\nline two", "emoji": "😀"}


def test_done_sentinel():
    assert DONE == b"data: [DONE]\n\n"
