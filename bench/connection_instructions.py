"""Instructions per connection of the HTTP protocol the gateway serves through, counted by callgrind in one process.

One connection's life, in memory (no socket: `tests/gateway/http_server.py`'s transport) on uvloop, as the request
bench's probes open one per request: made, one POST head and body in one read, a 3-message streamed answer from a
trivial ASGI app, closed. Counted for uvicorn's own `HttpToolsProtocol` and for `backends/client_timeouts.py`'s
protocol on it (the head, body and send timers, the head's size bound): their difference is what the timers cost a
connection. Each is run `--connections` times after a warm-up, callgrind counting only then:

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/connections.%p \\
        .venv/bin/python bench/connection_instructions.py [--connections 200] [--out /tmp/connections]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import uvicorn
import uvloop
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

sys.path.insert(0, str(Path(__file__).resolve().parent))

from callgrind_counts import counted  # the bench folder is not a package: its path is added above

from backends.client_timeouts import DEFAULT_HEADER_TIMEOUT_S, DEFAULT_SEND_TIMEOUT_S, client_timeout_protocol
from tests.gateway.http_server import serve_connection

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":1}'
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(BODY), BODY)
)


async def app(scope: dict, receive: Any, send: Any) -> None:
    """Reads the body, answers a head, one event and the end."""
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def connections(protocol_class: type[HttpToolsProtocol], config: uvicorn.Config, count: int) -> None:
    """`count` connections, one after another, through `protocol_class`."""
    state = ServerState()
    for _ in range(count):
        _, written = await serve_connection(protocol_class, config, state, REQUEST)
        if not written.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"unexpected answer: {written[:64]!r}")


def per_connection(out: str, dump: int, protocol_class: type[HttpToolsProtocol], count: int) -> float:
    """Instructions per connection through `protocol_class` (callgrind's dump number `dump` of this process)."""
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    config.load()
    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(connections(protocol_class, config, 50))
        return counted(out, dump, lambda: loop.run_until_complete(connections(protocol_class, config, count))) / count
    finally:
        loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--out", default="/tmp/connections", help="callgrind's --callgrind-out-file, less its .%%p")
    args = parser.parse_args()
    timed = client_timeout_protocol(DEFAULT_HEADER_TIMEOUT_S, DEFAULT_SEND_TIMEOUT_S)
    bare = per_connection(args.out, 1, HttpToolsProtocol, args.connections)
    with_timers = per_connection(args.out, 2, timed, args.connections)
    print("| protocol | instructions per connection |\n|---|---:|")
    print(f"| uvicorn's HttpToolsProtocol | {bare:,.0f} |")
    print(f"| client_timeout_protocol (backends/client_timeouts.py) | {with_timers:,.0f} |")
    print(f"| the timers' cost | {with_timers - bare:,.0f} |")


if __name__ == "__main__":
    main()
