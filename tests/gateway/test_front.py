"""`Front`'s send for streamed body chunks: the server's own unless a layer stands between."""

from __future__ import annotations

import asyncio
import gc
import weakref

from backends.trace_context import current_traceparent
from gateway.api.front import Front, more_body_send
from gateway.api.turns import PER_ITERATION
from gateway.observability.metrics import GatewayMetrics


def _scope() -> dict:
    return {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}


async def _receive() -> dict:
    return {"type": "http.request", "body": b"", "more_body": False}


def _run(app) -> tuple[list[tuple[str, dict]], GatewayMetrics]:
    """Run `app` behind Front; what reached the server's send, tagged by who sent it."""
    sent: list[tuple[str, dict]] = []

    async def server_send(message: dict) -> None:
        sent.append(("server", message))

    metrics = GatewayMetrics()
    asyncio.run(Front(app, app, metrics)(_scope(), _receive, server_send))
    return sent, metrics


async def _streaming_app(scope, receive, send) -> None:
    """Head, two chunks with the more-body send, the end with `send`; records whether it got the server's."""
    more = more_body_send(scope, send)
    scope["state"]["more_is_wrapper"] = more is send
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await more({"type": "http.response.body", "body": b"a", "more_body": True})
    await more({"type": "http.response.body", "body": b"b", "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def test_behind_front_alone_chunks_skip_its_wrapper_and_the_request_is_still_counted() -> None:
    scopes = []

    async def app(scope, receive, send):
        scopes.append(scope)
        await _streaming_app(scope, receive, send)

    sent, metrics = _run(app)
    assert scopes[0]["state"]["more_is_wrapper"] is False
    assert [m.get("body") for _, m in sent] == [None, b"a", b"b", b""]
    assert (b"x-request-id", scopes[0]["state"]["request_id"].encode()) in sent[0][1]["headers"]
    assert not metrics.in_flight  # the last message went through Front's wrapper: the request was finished


def test_a_layer_between_front_and_the_answer_sees_every_chunk() -> None:
    seen: list[bytes] = []

    async def layer(scope, receive, send):
        async def watching(message):
            seen.append(message.get("body", b"-"))
            await send(message)

        await _streaming_app(scope, receive, watching)

    sent, _ = _run(layer)
    assert seen == [b"-", b"a", b"b", b""]
    assert [m.get("body") for _, m in sent] == [None, b"a", b"b", b""]


def test_requests_arriving_together_take_turns_behind_front() -> None:
    """One more request than an iteration's turns: it starts after what the first request's work woke."""
    log: list[str] = []

    async def app(scope, receive, send):
        name = scope["path"]
        log.append(name)
        if name == "/r0":
            asyncio.get_running_loop().call_soon(log.append, "answer to /r0")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def server_send(message: dict) -> None:
        pass

    async def main() -> None:
        front = Front(app, app, GatewayMetrics())
        names = [f"/r{i}" for i in range(PER_ITERATION + 1)]
        await asyncio.gather(*(front({**_scope(), "path": n}, _receive, server_send) for n in names))

    asyncio.run(main())
    assert log == [*(f"/r{i}" for i in range(PER_ITERATION)), "answer to /r0", f"/r{PER_ITERATION}"]


def test_a_request_behind_front_leaves_no_reference_cycle() -> None:
    """What a request held goes with its last reference, not at a garbage collection: a cycle through the scope
    left each request's scope, record and server objects (the server's `send` among them) to the collector."""

    async def server_send(message: dict) -> None:
        pass

    send = weakref.ref(server_send)
    gc.disable()
    try:
        asyncio.run(Front(_streaming_app, _streaming_app, GatewayMetrics())(_scope(), _receive, server_send))
        del server_send
        assert send() is None
    finally:
        gc.enable()


def test_the_clients_traceparent_is_current_for_its_request_alone() -> None:
    """A well-formed `traceparent` is the current one while its request runs, and only then: the next request
    without one, and the caller once both ended, see none (Front sets it only when there is one to set)."""
    trace = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    seen: list[str | None] = []

    async def app(scope, receive, send) -> None:
        seen.append(current_traceparent.get())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def server_send(message: dict) -> None:
        pass

    async def both() -> str | None:
        front = Front(app, app, GatewayMetrics())
        await front({**_scope(), "headers": [(b"traceparent", trace.encode())]}, _receive, server_send)
        await front(_scope(), _receive, server_send)
        return current_traceparent.get()

    assert asyncio.run(both()) is None
    assert seen == [trace, None]
