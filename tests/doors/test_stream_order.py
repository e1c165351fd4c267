"""The stream order checks catch what they are for: each broken copy of a real stream is refused."""

from __future__ import annotations

import copy

import pytest

from tests.doors import test_messages, test_responses
from tests.doors.stream_order import messages_order, responses_order


@pytest.fixture(scope="module")
def streams(door) -> tuple[list[dict], list[dict]]:
    """A Responses stream of a message then a call, and a Messages stream of a text then a tool_use block."""
    door.say("Sure." + test_responses.CALL)
    responses = test_responses.stream(door, input="Weather?", tools=[test_responses.WEATHER])
    door.say("Sure." + test_messages.CALL)
    messages = test_messages.stream(door, messages=test_messages.USER, tools=[test_messages.WEATHER])
    return responses, messages


def _types(events: list[dict]) -> list[str]:
    return [e["type"] for e in events]


def _broken_responses(events: list[dict]) -> list[list[dict]]:
    kinds = _types(events)
    delta, item_done = kinds.index("response.output_text.delta"), kinds.index("response.output_item.done")
    swapped = copy.deepcopy(events)
    swapped[3]["sequence_number"], swapped[4]["sequence_number"] = 4, 3
    late = copy.deepcopy(events)  # a text delta after its item is done (sequence numbers kept in order)
    late.insert(item_done, late.pop(delta))
    for i, e in enumerate(late):
        e["sequence_number"] = i
    stranger = copy.deepcopy(events)
    stranger[delta]["item_id"] = "msg_other"
    short = copy.deepcopy(events)
    short[-1]["response"]["output"] = short[-1]["response"]["output"][:1]
    arguments = copy.deepcopy(events)
    arguments[kinds.index("response.function_call_arguments.done")]["arguments"] = "{}"
    return [swapped, late, stranger, short, arguments, events[:-1]]


def _broken_messages(events: list[dict]) -> list[list[dict]]:
    kinds = _types(events)
    delta, stop = kinds.index("content_block_delta"), kinds.index("content_block_stop")
    wrong_index = copy.deepcopy(events)
    wrong_index[delta]["index"] = 1
    unstopped = [e for i, e in enumerate(events) if i != stop]
    wrong_kind = copy.deepcopy(events)
    wrong_kind[delta]["delta"] = {"type": "input_json_delta", "partial_json": "{"}
    return [wrong_index, unstopped, wrong_kind, events[:-1], events[1:]]


def test_every_broken_stream_is_refused(streams):
    responses, messages = streams
    assert _types(responses).count("response.output_item.added") == 2
    assert [b["type"] for b in messages_order(messages)["content"]] == ["text", "tool_use"]
    responses_order(responses)
    for broken in _broken_responses(responses):
        with pytest.raises(AssertionError):
            responses_order(broken)
    for broken in _broken_messages(messages):
        with pytest.raises(AssertionError):
            messages_order(broken)
