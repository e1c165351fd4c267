"""Instructions per connection of the HTTP protocol the gateway serves through, counted by callgrind in one process.

One connection's life, in memory (no socket: `tests/gateway/http_server.py`'s transport) on uvloop, as the request
bench's probes open one per request: made, one POST head and body in one read, a 3-message streamed answer from a
trivial ASGI app, closed. Counted for uvicorn's own `HttpToolsProtocol` and for `backends/client_timeouts.py`'s
protocol on it (the head, body and send timers, the head's size bound): their difference is what the timers cost a
connection. Then the gateway's own uvicorn configuration (`gateway/cli.py`'s `uvicorn_config`, its protocol the
same) with `--proxy-headers` (the default: uvicorn's `ProxyHeadersMiddleware` around the app, the peer 127.0.0.1
trusted) and `--no-proxy-headers`, and with a trusted proxy's `X-Forwarded-Proto` / `X-Forwarded-For` sent: what
the middleware costs a request. Each is run `--connections` times after a warm-up, callgrind counting only then:

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
from gateway.cli import build_parser, uvicorn_config
from gateway.process.limits import ServerLimits
from tests.gateway.http_server import serve_connection

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":1}'
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(BODY), BODY)
)
PROXIED = REQUEST.replace(b"Connection:", b"X-Forwarded-Proto: https\r\nX-Forwarded-For: 203.0.113.7\r\nConnection:")


async def app(scope: dict, receive: Any, send: Any) -> None:
    """Reads the body, answers a head, one event and the end."""
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def connections(
    protocol_class: type[HttpToolsProtocol], config: uvicorn.Config, count: int, request: bytes
) -> None:
    """`count` connections, one after another, through `protocol_class`."""
    state = ServerState()
    for _ in range(count):
        _, written = await serve_connection(protocol_class, config, state, request)
        if not written.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"unexpected answer: {written[:64]!r}")


def _gateway_protocol(flag: str) -> tuple[type[HttpToolsProtocol], uvicorn.Config]:
    """The gateway's protocol and uvicorn configuration of `app` with `flag`."""
    config = uvicorn_config(app, build_parser().parse_args(["serve", flag]), ServerLimits())
    return config.http, config  # type: ignore[return-value]


def per_connection(
    out: str,
    dump: int,
    protocol_class: type[HttpToolsProtocol],
    config: uvicorn.Config | None,
    count: int,
    request: bytes = REQUEST,
) -> float:
    """Instructions per connection through `protocol_class` (callgrind's dump number `dump` of this process), with
    `config`, else uvicorn's defaults but its access log."""
    config = config or uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    config.load()
    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(connections(protocol_class, config, 50, request))
        work = lambda: loop.run_until_complete(connections(protocol_class, config, count, request))
        return counted(out, dump, work) / count
    finally:
        loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--out", default="/tmp/connections", help="callgrind's --callgrind-out-file, less its .%%p")
    args = parser.parse_args()
    timed = client_timeout_protocol(DEFAULT_HEADER_TIMEOUT_S, DEFAULT_SEND_TIMEOUT_S)
    bare = per_connection(args.out, 1, HttpToolsProtocol, None, args.connections)
    with_timers = per_connection(args.out, 2, timed, None, args.connections)
    print("| protocol | instructions per connection |\n|---|---:|")
    print(f"| uvicorn's HttpToolsProtocol | {bare:,.0f} |")
    print(f"| client_timeout_protocol (backends/client_timeouts.py) | {with_timers:,.0f} |")
    print(f"| the timers' cost | {with_timers - bare:,.0f} |")
    on, off, proxied_on, proxied_off = (
        per_connection(args.out, dump, *_gateway_protocol(flag), args.connections, request)
        for dump, flag, request in (
            (3, "--proxy-headers", REQUEST),
            (4, "--no-proxy-headers", REQUEST),
            (5, "--proxy-headers", PROXIED),
            (6, "--no-proxy-headers", PROXIED),
        )
    )
    print(f"| the gateway's uvicorn_config, --proxy-headers (default) | {on:,.0f} |")
    print(f"| the gateway's uvicorn_config, --no-proxy-headers | {off:,.0f} |")
    print(f"| the middleware's cost (on less off) | {on - off:,.0f} |")
    print(
        f"| the same with a trusted proxy's X-Forwarded-Proto / -For sent (on less off) | {proxied_on - proxied_off:,.0f} |"
    )


if __name__ == "__main__":
    main()
