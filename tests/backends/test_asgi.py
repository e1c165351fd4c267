"""The frames both servers write, read back by the reader the gateway uses for backend streams."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from backends.asgi import (
    BODY_TIMED_OUT,
    DONE_FRAME,
    BodyTimedOut,
    BodyTooLarge,
    ClientLeft,
    json_response,
    read_json_body,
    sse_frame,
    wait_for_disconnect,
)
from backends.base import BackendError
from backends.exact_json import WideInteger
from backends.http_backend import SSE_DONE, stream_event

VALUES = [{"text": "line one\nline two", "emoji": "😀"}, {"nested": {"a": [1, 2.5, None, True]}}, {"": "\r\n\x00"}]


@pytest.mark.parametrize("value", VALUES)
def test_a_frame_is_one_data_line_the_stream_reader_reads_back(value):
    frame = sse_frame(value)
    lines = frame.split(b"\n")
    assert lines[0].startswith(b"data: ") and lines[1:] == [b"", b""], "newlines inside values are escaped"
    assert stream_event(lines[0]) == value


def test_the_done_frame_is_what_the_reader_takes_for_the_end():
    lines = DONE_FRAME.split(b"\n")
    assert lines[1:] == [b"", b""]
    assert stream_event(lines[0]) == SSE_DONE
    with pytest.raises(BackendError, match="not an object"):  # a JSON string spelling it is not the sentinel
        stream_event(sse_frame("[DONE]").split(b"\n")[0])


def test_json_response_body_and_headers():
    response = json_response({"a": "é"}, status=201, headers={"x-k": "v"})
    assert response.status_code == 201 and orjson.loads(response.body) == {"a": "é"}
    assert response.headers["content-type"] == "application/json" and response.headers["x-k"] == "v"


def test_wait_for_disconnect_returns_only_on_disconnect():
    async def scenario() -> list[str]:
        messages = asyncio.Queue()
        seen = []

        async def receive():
            message = await messages.get()
            seen.append(message["type"])
            return message

        waiter = asyncio.create_task(wait_for_disconnect(receive))
        await messages.put({"type": "http.request", "body": b"", "more_body": False})
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not waiter.done()
        await messages.put({"type": "http.disconnect"})
        await asyncio.wait_for(waiter, 5)
        return seen

    assert asyncio.run(scenario()) == ["http.request", "http.disconnect"]


def _read(messages: list[dict], limit: int, headers: list | None = None, **scope):
    """read_json_body over `messages` as the ASGI server would deliver them (`scope`: its further keys)."""
    queue = list(messages)

    async def receive():
        return queue.pop(0)

    return asyncio.run(read_json_body({"headers": headers or [], **scope}, receive, limit))


def test_a_body_is_read_in_parts_up_to_its_limit():
    parts = [{"type": "http.request", "body": b'{"a": ', "more_body": True}, {"type": "http.request", "body": b"1}"}]
    assert _read(parts, limit=8) == {"a": 1}
    with pytest.raises(BodyTooLarge):  # a chunked body, refused once its bytes pass the limit
        _read(parts, limit=7)
    with pytest.raises(BodyTooLarge):  # a declared length past it: refused before a byte is read
        _read([], limit=7, headers=[(b"content-length", b"8")])
    with pytest.raises(ClientLeft) as left:
        _read([parts[0], {"type": "http.disconnect"}], limit=8)
    assert not isinstance(left.value, BodyTimedOut)
    with pytest.raises(BodyTimedOut):  # the server cut the body for stalling (and answered 408 itself)
        _read([parts[0], {"type": "http.disconnect"}], limit=8, **{BODY_TIMED_OUT: True})
    with pytest.raises(orjson.JSONDecodeError):
        _read([{"type": "http.request", "body": b"{"}], limit=8)
    with pytest.raises(WideInteger):  # orjson would make it a float (backends/exact_json.py)
        _read([{"type": "http.request", "body": b'{"seed": 18446744073709551616}'}], limit=64)
