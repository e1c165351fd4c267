"""The chat chunk stream's bytes: pre-encoded envelope ends frame a choice exactly as the whole chunk encoded, and
one backend step leaves as one write (the opening with the first step; usage, [DONE] and the body's end together)."""

from __future__ import annotations

import asyncio
import functools

import pytest

from backends.asgi import DONE_FRAME, sse_frame
from gateway.api.disconnect import ClientWatch
from gateway.api.sse import SSEResponse
from gateway.api.streaming import _chunk_frame_ends, _ChunkDoor, _stream
from gateway.types import ChoiceStep, Piece

ENVELOPE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": 'm "quoted" é'}


@pytest.mark.parametrize("include_usage", [False, True])
def test_frame_ends_write_the_same_bytes_as_the_whole_chunk(include_usage):
    head, tail = _chunk_frame_ends(ENVELOPE, include_usage)
    choice = {"index": 0, "delta": {"content": 'a "choices":[0] b'}, "logprobs": None, "finish_reason": None}
    usage = {"usage": None} if include_usage else {}
    assert head + sse_frame(choice)[6:-2] + tail == sse_frame({**ENVELOPE, "choices": [choice], **usage})


class _Renderer:
    """Each step's text as one content chunk choice; the finish as another."""

    def opening(self):
        return [{"index": 0, "delta": {"role": "assistant", "content": ""}}]

    def step(self, index, step):
        out = [{"index": index, "delta": {"content": step.pieces[0].text}}]
        return out + ([{"index": index, "finish_reason": step.finish_reason}] if step.finish_reason else [])

    def fold(self, chunks):
        return chunks

    def usage(self):
        return {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}


@pytest.mark.anyio
async def test_one_write_per_step_with_the_opening_first_and_the_usage_last():
    steps = [(0, ChoiceStep([Piece("a")], completion_tokens=1)), (0, ChoiceStep([Piece("b")], finish_reason="length"))]

    async def events():
        for step in steps[1:]:
            yield step

    messages = []

    async def send_more(message):
        messages.append(("more", message))

    async def send(message):
        messages.append(("last", message))

    noted = []
    door = _ChunkDoor(_Renderer(), ENVELOPE, True, "chat.completion")
    await _stream(steps[0], events(), door, noted.append, send_more, send)
    frame = lambda choices, usage=None: sse_frame({**ENVELOPE, "choices": choices, "usage": usage})
    r = _Renderer()
    assert [(by, m["type"], m["body"], m["more_body"]) for by, m in messages] == [
        ("more", "http.response.body", frame(r.opening()) + frame(r.step(0, steps[0][1])), True),
        ("more", "http.response.body", frame(r.step(0, steps[1][1])[:1]) + frame(r.step(0, steps[1][1])[1:]), True),
        ("last", "http.response.body", frame([], r.usage()) + DONE_FRAME, False),  # the body's end goes with [DONE]
    ]
    assert noted == [steps[1][1]]  # the first step is noted by the caller, when it arrives


@pytest.mark.anyio
async def test_the_first_step_leaves_with_the_head_and_the_rest_from_a_task_of_its_own():
    """In a burst, the first token must not wait behind the work the loop has ready when the head goes out (other
    requests'): the answer sends it in the same step; the later steps are read by a task of their own, which a
    cancelled answer cancels."""
    loop = asyncio.get_running_loop()
    sent, tasks, closed = [], [], []

    async def events():
        try:
            tasks.append(asyncio.current_task())
            yield (0, ChoiceStep([Piece("b")], completion_tokens=2))
            await asyncio.sleep(10)
        finally:
            closed.append(True)

    async def send(message):
        if message["type"] == "http.response.start":
            loop.call_soon(sent.append, "other work")
        sent.append(message.get("body", "head"))

    async def receive():
        await asyncio.sleep(10)

    stream = events()
    door = _ChunkDoor(_Renderer(), ENVELOPE, False, "chat.completion")
    first = (0, ChoiceStep([Piece("a")], completion_tokens=1))
    write = functools.partial(_stream, first, stream, door, lambda step: None)
    answer = asyncio.ensure_future(SSEResponse(write, stream, ClientWatch(receive))({"type": "http"}, receive, send))
    await asyncio.sleep(0.05)
    r = _Renderer()
    frame = lambda choices: sse_frame({**ENVELOPE, "choices": choices})
    assert sent == [
        "head",
        frame(r.opening()) + frame(r.step(*first)),
        "other work",
        frame(r.step(0, ChoiceStep([Piece("b")]))),
    ]
    assert tasks[0] is not answer and not tasks[0].done()
    answer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await answer
    assert tasks[0].cancelled() and closed == [True]


@pytest.mark.anyio
async def test_a_first_step_that_ends_its_choice_is_followed_by_the_end_in_the_answers_own_task():
    """A one-token answer (its first step has the finish) starts no task for its end: the events are read to their
    end, and the end sent, by the answer itself, with the same bytes."""
    sent, tasks = [], []

    async def events():
        tasks.append(asyncio.current_task())
        return
        yield

    async def send(message):
        sent.append((message["body"], message["more_body"]))

    door = _ChunkDoor(_Renderer(), ENVELOPE, True, "chat.completion")
    first = (0, ChoiceStep([Piece("a")], finish_reason="length", completion_tokens=1))
    await _stream(first, events(), door, lambda step: None, send, send)
    r = _Renderer()
    frame = lambda choices, usage=None: sse_frame({**ENVELOPE, "choices": choices, "usage": usage})
    assert sent == [
        (frame(r.opening()) + b"".join(frame([c]) for c in r.step(*first)), True),
        (frame([], r.usage()) + DONE_FRAME, False),
    ]
    assert tasks == [asyncio.current_task()]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
