"""One watcher of the client per answer (gateway/api/disconnect.py) and the SSE answer that uses it (api/sse.py)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.api.disconnect import ClientDisconnected, ClientWatch
from gateway.api.sse import SSE_HEADERS, SSEResponse


class Client:
    """An ASGI `receive` whose client leaves when `leave()` is called; `sent` collects what `send` got."""

    def __init__(self) -> None:
        self._left = asyncio.Event()
        self.sent: list[dict] = []
        self.waiting = 0
        """Calls of `receive` in progress."""

    def leave(self) -> None:
        self._left.set()

    async def receive(self) -> dict:
        self.waiting += 1
        try:
            await self._left.wait()
        finally:
            self.waiting -= 1
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        self.sent.append(message)


def test_guarded_work_gives_its_value_while_the_client_stays() -> None:
    async def main() -> None:
        watch = ClientWatch(Client().receive)
        assert await watch.guard(asyncio.sleep(0.01, "done")) == "done"
        watch.stop()

    asyncio.run(main())


def test_only_the_disconnect_message_counts_as_the_client_leaving() -> None:
    async def main() -> None:
        messages = [{"type": "http.request", "body": b"", "more_body": False}, {"type": "http.disconnect"}]
        arrivals = [asyncio.Event(), asyncio.Event()]

        async def receive() -> dict:
            await arrivals[0].wait()
            arrivals.pop(0)
            return messages.pop(0)

        watch = ClientWatch(receive)
        arrivals[0].set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert messages == [{"type": "http.disconnect"}] and not watch.left  # a stray message: still watching
        arrivals[0].set()
        with pytest.raises(ClientDisconnected):
            await watch.guard(asyncio.sleep(10))
        assert watch.left and not messages

    asyncio.run(main())


def test_a_client_that_leaves_cancels_the_guarded_work_and_only_it() -> None:
    async def main() -> None:
        client, cleaned = Client(), []

        async def work() -> None:
            try:
                await asyncio.sleep(10)
            finally:
                cleaned.append(True)

        watch = ClientWatch(client.receive)
        asyncio.get_running_loop().call_later(0.01, client.leave)
        with pytest.raises(ClientDisconnected):
            await watch.guard(work())
        assert cleaned == [True]
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0  # the serving task goes on, not cancelled
        await asyncio.sleep(0)
        with pytest.raises(ClientDisconnected):  # gone already: the work does not start
            await watch.guard(work())
        assert cleaned == [True]

    asyncio.run(main())


def test_a_client_gone_before_the_watch_is_seen_at_once_and_bare_yields_are_stepped() -> None:
    """The receive's first step runs as the watch starts (no loop turn first); a receive that yields bare (an
    `asyncio.sleep(0)`) is stepped again on the next turn, as a task would."""

    async def main() -> None:
        client = Client()
        client.leave()
        watch = ClientWatch(client.receive)
        assert watch.left
        with pytest.raises(ClientDisconnected):
            await watch.guard(asyncio.sleep(10))

        turns = []

        async def receive() -> dict:
            for turn in range(3):
                turns.append(turn)
                await asyncio.sleep(0)
            return {"type": "http.disconnect"}

        watch = ClientWatch(receive)
        assert turns == [0] and not watch.left
        with pytest.raises(ClientDisconnected):
            await watch.guard(asyncio.sleep(10))
        assert turns == [0, 1, 2] and watch.left

    asyncio.run(main())


def test_a_cancellation_from_elsewhere_goes_on() -> None:
    async def main() -> None:
        watch = ClientWatch(Client().receive)
        serving = asyncio.create_task(watch.guard(asyncio.sleep(10)))
        await asyncio.sleep(0.01)
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
        watch.stop()

    asyncio.run(main())


async def _events(closed: list[bool]):
    try:
        yield b"data: 1\n\n"
        await asyncio.sleep(10)
        yield b"data: 2\n\n"
    finally:
        closed.append(True)


def _writer(events):
    """A body writer sending each event as one message, then the body's end."""

    async def write(send_more, send):
        async for chunk in events:
            await send_more({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return write


def test_an_sse_answer_ends_quietly_when_its_client_leaves_and_closes_its_events() -> None:
    async def main() -> None:
        client, closed = Client(), []
        watch = ClientWatch(client.receive)
        asyncio.get_running_loop().call_later(0.05, client.leave)
        events = _events(closed)
        await SSEResponse(_writer(events), events, watch)({"type": "http"}, client.receive, client.send)
        assert [m["type"] for m in client.sent] == ["http.response.start", "http.response.body"]
        assert client.sent[0]["headers"] == SSE_HEADERS and closed == [True]
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0

    asyncio.run(main())


def test_an_sse_answer_sends_every_event_then_its_end() -> None:
    async def events():
        yield b"data: 1\n\n"
        yield b"data: [DONE]\n\n"

    async def main() -> None:
        client = Client()
        watch = ClientWatch(client.receive)
        stream = events()
        await SSEResponse(_writer(stream), stream, watch)({"type": "http"}, client.receive, client.send)
        bodies = [(m["body"], m["more_body"]) for m in client.sent[1:]]
        assert bodies == [(b"data: 1\n\n", True), (b"data: [DONE]\n\n", True), (b"", False)]
        assert client.waiting == 0  # the watch ends with the answer: its receive is closed where it waited

    asyncio.run(main())


def test_an_sse_answer_writes_its_body_right_after_its_head_and_a_cancelled_answer_ends_it() -> None:
    """The writer runs in the answer's own step, right after the head (api/streaming.py::_stream then reads its later
    steps in a task of its own); a cancellation from elsewhere (the server stopping) still ends the body and closes
    its events."""

    async def main() -> None:
        client, closed, bodies = Client(), [], []
        watch = ClientWatch(client.receive)
        events = _events(closed)
        write = _writer(events)

        async def body(send_more, send):
            bodies.append((asyncio.current_task(), len(client.sent)))
            await write(send_more, send)

        answer = asyncio.ensure_future(SSEResponse(body, events, watch)({"type": "http"}, client.receive, client.send))
        await asyncio.sleep(0.05)
        assert bodies == [(answer, 1)] and not answer.done()  # in the answer's task, once the head went out
        answer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await answer
        assert closed == [True]

    asyncio.run(main())
