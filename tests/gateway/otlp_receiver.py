"""An OTLP/HTTP traces receiver, as a collector implements it: POST /v1/traces with a protobuf
ExportTraceServiceRequest (opentelemetry-proto, the published contract), each span kept as a plain dict.

No OpenTelemetry Collector installs offline here (not on PyPI, npm or Debian), so tests and bench/tracing_bench.py
receive with this one.  `python -m tests.gateway.otlp_receiver` serves until killed and prints `READY <port>`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class Collector:
    """An OTLP/HTTP traces receiver: POST /v1/traces, protobuf in, each span kept as a plain dict."""

    def __init__(self, keep: bool = True, refuse_first: int = 0) -> None:
        """`refuse_first`: answer that many posts first with 503 and `retry-after: 1` (a collector restarting), keeping
        none of their spans."""
        self.spans: list[dict[str, Any]] = []
        """Every span received (when `keep`)."""
        self.posts = 0
        self.received = 0
        """Spans received."""
        self._keep = keep
        self.refused = 0
        self._refuse_first = refuse_first
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ok = self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf"
                if ok and collector.refused < collector._refuse_first:
                    collector.refused += 1
                    self.send_response(503)
                    self.send_header("Retry-After", "1")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if ok:
                    collector.receive(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString() if ok else b""
                self.send_response(200 if ok else 400)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def do_GET(self) -> None:
                """GET /received: the number of spans received so far, as text."""
                answer = str(collector.received).encode()
                self.send_response(200 if self.path == "/received" else 404)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @classmethod
    @contextmanager
    def running(cls, **options: Any) -> Iterator[Collector]:
        """A receiver serving on 127.0.0.1 (its `url`) in a thread until the block ends."""
        receiver = cls(**options)
        thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield receiver
        finally:
            receiver.server.shutdown()
            receiver.server.server_close()

    def receive(self, request: ExportTraceServiceRequest) -> None:
        self.posts += 1
        self.received += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        if not self._keep:
            return
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        {
                            "name": span.name,
                            "trace": span.trace_id.hex(),
                            "id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "kind": span.kind,
                            "attributes": _attributes(span.attributes),
                            "events": [e.name for e in span.events],
                            "error": span.status.code == span.status.STATUS_CODE_ERROR,
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                            "service": resource.get("service.name"),
                        }
                    )

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["trace"] == trace_id]


def _attributes(pairs) -> dict[str, Any]:
    """OTLP KeyValues → Python values (strings, ints, floats, bools, lists of them)."""

    def plain(v):
        kind = v.WhichOneof("value")
        if kind == "array_value":
            return [plain(x) for x in v.array_value.values]
        return getattr(v, kind)

    return {kv.key: plain(kv.value) for kv in pairs}


if __name__ == "__main__":
    receiver = Collector(keep=False)
    print(f"READY {receiver.server.server_address[1]}", flush=True)
    receiver.server.serve_forever()
