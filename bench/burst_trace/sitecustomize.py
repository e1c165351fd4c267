"""Loaded by any Python started with this folder on PYTHONPATH and BURST_TRACE set to a folder: in a gateway
process, a timeline per chat request (arrival, backend connect, request written, backend head, client head, first
body message), each moment as (wall seconds, times the request's task was suspended so far, the loop thread's CPU seconds), written to
BURST_TRACE/<pid>.jsonl whenever no chat request is in flight. Used by `bench/burst_timeline.py`."""

from __future__ import annotations

import os

if os.environ.get("BURST_TRACE"):
    import contextvars
    import json
    import time

    from backends import http_stream
    from gateway.api import front

    _out = os.path.join(os.environ["BURST_TRACE"], f"{os.getpid()}.jsonl")
    _current: contextvars.ContextVar[dict | None] = contextvars.ContextVar("burst_record", default=None)
    _done: list[dict] = []
    _flight = [0]

    def _mark(record: dict | None, name: str) -> None:
        if record is not None and name not in record:
            record[name] = (time.perf_counter(), record.get("steps", 0), time.thread_time())

    def _counting_steps(coro, record: dict):  # type: ignore[no-untyped-def]
        """Await `coro`, counting in record["steps"] the times it gave the loop back (its task was suspended)."""
        inner, value, error = coro.__await__(), None, None
        record["steps"] = 0
        while True:
            try:
                request = inner.send(value) if error is None else inner.throw(error)
            except StopIteration as done:
                return done.value
            record["steps"] += 1
            try:
                value, error = (yield request), None
            except BaseException as e:  # noqa: BLE001 (handed on to the coroutine, as await does)
                value, error = None, e

    _call = front.Front.__call__

    async def _traced_call(self, scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            return await _call(self, scope, receive, send)
        record: dict = {}
        _mark(record, "arrive")
        _current.set(record)
        _flight[0] += 1

        async def raw_send(message):  # type: ignore[no-untyped-def]
            _mark(record, "client_head" if message["type"] == "http.response.start" else "client_body")
            record["sends"] = record.get("sends", 0) + 1
            await send(message)

        try:
            await _Awaiting(_counting_steps(_call(self, scope, receive, raw_send), record))
        finally:
            _flight[0] -= 1
            _done.append(record)
            if _flight[0] == 0:
                with open(_out, "a") as f:  # noqa: ASYNC230 (once per burst, after it)
                    f.writelines(json.dumps(r) + "\n" for r in _done)
                _done.clear()

    class _Awaiting:
        def __init__(self, generator):  # type: ignore[no-untyped-def]
            self._generator = generator

        def __await__(self):  # type: ignore[no-untyped-def]
            return self._generator

    front.Front.__call__ = _traced_call

    _connect = http_stream.StreamPool._connect

    async def _traced_connect(self):  # type: ignore[no-untyped-def]
        record = _current.get()
        _mark(record, "connect")
        try:
            return await _connect(self)
        finally:
            _mark(record, "connected")

    http_stream.StreamPool._connect = _traced_connect

    _read_head = http_stream._Connection.read_head

    async def _traced_read_head(self):  # type: ignore[no-untyped-def]
        record = _current.get()
        _mark(record, "written")
        try:
            return await _read_head(self)
        finally:
            _mark(record, "backend_head")

    http_stream._Connection.read_head = _traced_read_head
