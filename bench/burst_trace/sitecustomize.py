"""Loaded by any Python started with this folder on PYTHONPATH; it traces when BURST_TRACE or BURST_EVENTS names a
folder, and keeps the tracing out of the product code.

In a gateway process, a timeline per chat request: arrive, connect / connected (a fresh backend connection),
written (backend request), backend_head, client_head, client_body (first body message), each moment as (wall
seconds, times the request's task was suspended so far, the loop thread's CPU seconds, its run-queue wait seconds:
time it was ready to run while another thread had the core). Wall times are time.perf_counter (CLOCK_MONOTONIC:
one clock for every process).

- BURST_TRACE (`bench/burst_timeline.py`): the timelines, written to BURST_TRACE/<pid>.jsonl whenever no chat request
  is in flight.
- BURST_EVENTS (`bench/overhead_bench.py --events`): a log of JSON lists [kind, wall, ...] written at exit to
  BURST_EVENTS/<role>-<pid>.jsonl (role: gateway or stand-in; other processes are left alone). The gateway's: "req"
  with each timeline, "accept" / "close" of a client connection (uvicorn), "bopen" / "bclose" of a backend
  connection, "sweep" of the backend pool (idle connections kept after it), "gc_start" / "gc_stop" of a cyclic
  collection (its generation, the loop thread's CPU seconds). The stand-in's: "gen" per `/generate` request read,
  "tick" when the first stream waits for the next decode step. `bench/burst_events.py` reads it.
"""

from __future__ import annotations

import os
import sys

_ROLE = (
    "gateway"
    if "gateway.cli" in sys.orig_argv or any(a.endswith("gateway/cli.py") for a in sys.orig_argv)
    else "stand-in"
    if any(a.endswith("fast_backend.py") for a in sys.orig_argv)
    else None
)
_TRACE, _EVENTS = os.environ.get("BURST_TRACE"), os.environ.get("BURST_EVENTS")

if _ROLE is not None and (_EVENTS or (_TRACE and _ROLE == "gateway")):
    import atexit
    import json
    import time

    import uvicorn

    _events: list[list] = []
    _now = time.perf_counter

    def _write_events() -> None:
        if _EVENTS:
            with open(os.path.join(_EVENTS, f"{_ROLE}-{os.getpid()}.jsonl"), "w") as f:
                f.writelines(json.dumps(e) + "\n" for e in _events)

    atexit.register(_write_events)
    _shutdown = uvicorn.Server.shutdown

    async def _shutdown_writing(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        """Written here too: uvicorn re-raises a SIGTERM it caught once it has shut down, and atexit never runs."""
        await _shutdown(self, *args, **kwargs)
        _write_events()

    uvicorn.Server.shutdown = _shutdown_writing

    if _ROLE == "gateway":
        import contextvars
        import gc

        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        from backends import http_stream
        from gateway.api import front

        _out = os.path.join(_TRACE, f"{os.getpid()}.jsonl") if _TRACE else None
        _current: contextvars.ContextVar[dict | None] = contextvars.ContextVar("burst_record", default=None)
        _done: list[dict] = []
        _flight = [0]
        _schedstat = os.open("/proc/thread-self/schedstat", os.O_RDONLY)  # the main thread's: it runs the loop

        def _mark(record: dict | None, name: str) -> None:
            if record is not None and name not in record:
                wait = int(os.pread(_schedstat, 64, 0).split()[1]) / 1e9
                record[name] = (_now(), record.get("steps", 0), time.thread_time(), wait)

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

        class _Awaiting:
            def __init__(self, generator):  # type: ignore[no-untyped-def]
                self._generator = generator

            def __await__(self):  # type: ignore[no-untyped-def]
                return self._generator

        _call = front.Front.__call__

        async def _traced_call(self, scope, receive, send):  # type: ignore[no-untyped-def]
            if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
                return await _call(self, scope, receive, send)
            record: dict = {}
            _mark(record, "arrive")
            _current.set(record)
            _flight[0] += 1
            if _EVENTS:
                _events.append(["req", record["arrive"][0], record])

            async def raw_send(message):  # type: ignore[no-untyped-def]
                _mark(record, "client_head" if message["type"] == "http.response.start" else "client_body")
                record["sends"] = record.get("sends", 0) + 1
                await send(message)

            try:
                await _Awaiting(_counting_steps(_call(self, scope, receive, raw_send), record))
            finally:
                _flight[0] -= 1
                if _out:
                    _done.append(record)
                    if _flight[0] == 0:
                        with open(_out, "a") as f:  # noqa: ASYNC230 (once per burst, after it)
                            f.writelines(json.dumps(r) + "\n" for r in _done)
                        _done.clear()

        front.Front.__call__ = _traced_call

        def _marking(cls: type, method: str, before: str, after: str) -> None:
            """`cls.method` (a coroutine function) marks `before` and `after` in the current request's timeline."""
            original = getattr(cls, method)

            async def marked(self):  # type: ignore[no-untyped-def]
                record = _current.get()
                _mark(record, before)
                try:
                    return await original(self)
                finally:
                    _mark(record, after)

            setattr(cls, method, marked)

        _marking(http_stream.StreamPool, "_connect", "connect", "connected")
        _marking(http_stream._Connection, "read_head", "written", "backend_head")

        if _EVENTS:

            def _logging(cls: type, method: str, kind: str) -> None:
                original = getattr(cls, method)

                def logged(self, *args):  # type: ignore[no-untyped-def]
                    _events.append([kind, _now()])
                    return original(self, *args)

                setattr(cls, method, logged)

            _logging(HttpToolsProtocol, "connection_made", "accept")
            _logging(HttpToolsProtocol, "connection_lost", "close")
            _logging(http_stream._Connection, "connection_made", "bopen")
            _logging(http_stream._Connection, "connection_lost", "bclose")
            gc.callbacks.append(
                lambda phase, info: _events.append([f"gc_{phase}", _now(), info["generation"], time.thread_time()])
            )
            _sweep = http_stream.StreamPool._sweep_idle

            def _traced_sweep(self):  # type: ignore[no-untyped-def]
                _sweep(self)
                _events.append(["sweep", _now(), len(self._idle)])

            http_stream.StreamPool._sweep_idle = _traced_sweep

    else:  # the stand-in: its classes live in __main__, patched once uvicorn starts serving
        _run = uvicorn.Server.run

        def _traced_run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            main = sys.modules["__main__"]
            events, steps = main.FastBackend._events, main.DecodeSteps

            def traced_events(backend, *args):  # type: ignore[no-untyped-def]
                _events.append(["gen", _now()])  # the request is read; its first token goes out next
                return events(backend, *args)

            main.FastBackend._events = traced_events
            next_step = steps.next

            async def traced_next(self):  # type: ignore[no-untyped-def]
                if not self._waiting:
                    _events.append(["tick", _now()])  # the first stream to wait for a step: one event per step
                return await next_step(self)

            steps.next = traced_next
            return _run(self, *args, **kwargs)

        uvicorn.Server.run = _traced_run
