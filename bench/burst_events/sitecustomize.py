"""Loaded by any Python started with this folder on PYTHONPATH and BURST_EVENTS set to a folder: a timestamped log of
what each process of `bench/overhead_bench.py --events DIR` did around its bursts, written at exit to
BURST_EVENTS/<role>-<pid>.jsonl (role: gateway or stand-in; other processes are left alone).

Every event is a JSON list [kind, wall (time.perf_counter: CLOCK_MONOTONIC, one clock for all processes), ...]:

- gateway: "req" per chat request, then its moments arrive / written (backend request written) / head (backend
  answer's head) / body (first body message to the client), each (wall, the loop thread's CPU seconds, its
  run-queue wait seconds: time it was ready to run but another task had the core); "accept" / "close" of a client
  connection (uvicorn), "bopen" / "bclose" of a backend connection, "sweep" of the backend pool (idle connections
  kept after it), "gc_start" / "gc_stop" of a cyclic collection (its generation, the loop thread's CPU seconds);
- stand-in: "gen" per `/generate` request read, "tick" when the first stream waits for the next decode step.

Keeps tracing out of the product code; `bench/burst_events.py` reads the log.
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

if os.environ.get("BURST_EVENTS") and _ROLE is not None:
    import atexit
    import json
    import time

    import uvicorn

    _events: list[list] = []
    _now = time.perf_counter

    @atexit.register
    def _write() -> None:
        with open(os.path.join(os.environ["BURST_EVENTS"], f"{_ROLE}-{os.getpid()}.jsonl"), "w") as f:
            f.writelines(json.dumps(e) + "\n" for e in _events)

    _shutdown = uvicorn.Server.shutdown

    async def _shutdown_writing(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        """Written here too: uvicorn re-raises a SIGTERM it caught once it has shut down, and atexit never runs."""
        await _shutdown(self, *args, **kwargs)
        _write()

    uvicorn.Server.shutdown = _shutdown_writing

    if _ROLE == "gateway":
        import contextvars
        import gc

        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        from backends import http_stream
        from gateway.api import front

        _schedstat = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        # opened in the main thread, which runs the loop: the file stays that thread's
        _thread_time = time.thread_time
        _current: contextvars.ContextVar[dict | None] = contextvars.ContextVar("burst_event", default=None)

        def _mark(record: dict | None, name: str) -> None:
            if record is not None and name not in record:
                wait = int(os.pread(_schedstat, 64, 0).split()[1]) / 1e9
                record[name] = (_now(), _thread_time(), wait)

        _call = front.Front.__call__

        async def _traced_call(self, scope, receive, send):  # type: ignore[no-untyped-def]
            if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
                return await _call(self, scope, receive, send)
            record: dict = {}
            _mark(record, "arrive")
            _current.set(record)
            _events.append(["req", record["arrive"][0], record])

            async def raw_send(message):  # type: ignore[no-untyped-def]
                if message["type"] == "http.response.body":
                    _mark(record, "body")
                await send(message)

            return await _call(self, scope, receive, raw_send)

        front.Front.__call__ = _traced_call

        _read_head = http_stream._Connection.read_head

        async def _traced_read_head(self):  # type: ignore[no-untyped-def]
            record = _current.get()
            _mark(record, "written")
            try:
                return await _read_head(self)
            finally:
                _mark(record, "head")

        http_stream._Connection.read_head = _traced_read_head

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

        def _gc(phase: str, info: dict) -> None:
            _events.append(["gc_" + phase, _now(), info["generation"], _thread_time()])

        gc.callbacks.append(_gc)

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
