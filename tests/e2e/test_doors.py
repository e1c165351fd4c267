"""End to end through real HTTP on the real model: the Responses API (the official openai client and the
OpenAI Agents SDK) and the Anthropic Messages API (the official anthropic client)."""

from __future__ import annotations

import json

import anthropic
import httpx
import jsonschema
import openai
import pytest

from tests.doors.conftest import named_events
from tests.doors.published_types import check_event, check_response
from tests.doors.stream_order import messages_order, responses_order
from tests.doors.weather_agent import run_weather_agent

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ASK = "What is the weather in Paris right now?"
ZERO = {"temperature": 0}
"""Older Anthropic clients send temperature; the current one has no parameter for it."""


def respond(client, model_id, **kw):
    kw.setdefault("input", ASK)
    kw.setdefault("temperature", 0)
    kw.setdefault("max_output_tokens", 16)
    return client.responses.create(model=model_id, **kw)


def run_free(response: dict) -> dict:
    """A Response without what two runs of one greedy request may differ in: ids, times, prefix cache hits."""
    out = {key: value for key, value in response.items() if key not in ("id", "created_at", "completed_at")}
    out["output"] = [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in response["output"]]
    out["usage"] = {**response["usage"], "input_tokens_details": None}
    return out


NAMED_CALL = {
    "tools": [WEATHER],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "parallel_tool_calls": False,
    "max_output_tokens": 48,
}


@pytest.mark.parametrize("extra", [{}, NAMED_CALL], ids=["text-cut-by-max_output_tokens", "named-call"])
def test_a_streamed_response_adds_up_to_the_same_response(gateway, client, model_id, extra):
    """Greedy: the stream's events, in the published order, end in the Response the same request gets unstreamed,
    and the openai client's stream helper accumulates that Response too."""
    body = {"model": model_id, "input": ASK, "temperature": 0, "max_output_tokens": 16, **extra}
    made = httpx.post(f"{gateway.base_url}/v1/responses", json=body, timeout=120).json()
    check_response(made)
    events = named_events(httpx.post(f"{gateway.base_url}/v1/responses", json={**body, "stream": True}, timeout=120))
    for event in events:
        check_event(event)
    assert run_free(responses_order(events)) == run_free(made)
    if not extra:  # 16 tokens cut the answer: an incomplete response, its message marked so
        assert made["incomplete_details"] == {"reason": "max_output_tokens"}
        assert events[-1]["type"] == "response.incomplete" and made["output"][0]["content"][0]["text"]
        assert [item["status"] for item in made["output"]] == ["incomplete"]
        return
    (call,) = made["output"]
    assert made["status"] == "completed" and call["type"] == "function_call" and call["name"] == "get_weather"
    jsonschema.validate(json.loads(call["arguments"]), WEATHER["parameters"])
    with client.responses.stream(**body) as stream:
        final = stream.get_final_response()  # the helper wants response.completed: a cut response raises there
    assert [(i.type, i.name, i.arguments) for i in final.output] == [("function_call", call["name"], call["arguments"])]


def test_json_schema_format(client, model_id):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}
    response = respond(
        client,
        model_id,
        max_output_tokens=40,
        text={"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}},
    )
    jsonschema.validate(json.loads(response.output_text), schema)


def test_three_turn_chain_and_stored_response(gateway, client, model_id):
    first = respond(client, model_id, input="My name is Ada.", instructions="Answer in one short sentence.")
    second = respond(client, model_id, input="What is my name?", previous_response_id=first.id)
    third = respond(client, model_id, input="Say it again.", previous_response_id=second.id)
    assert third.previous_response_id == second.id and third.output_text
    # the third prompt holds both earlier turns
    assert third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens
    assert client.responses.retrieve(second.id).output_text == second.output_text
    assert [i.type for i in client.responses.input_items.list(third.id).data] == ["message"]
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as e:
        respond(client, model_id, tools=[{"type": "web_search"}])
    assert e.value.body["param"] == "tools[0].type"


def test_agents_sdk_loop_calls_the_tool_and_answers(gateway, model_id):
    # the 135M model would not choose the tool itself: the first turn forces it
    result, cities = run_weather_agent(gateway.base_url, model_id, ASK, temperature=0, max_tokens=48)
    assert len(cities) >= 1
    kinds = [item.type for item in result.new_items]
    assert kinds[:2] == ["tool_call_item", "tool_call_output_item"] and kinds[-1] == "message_output_item"
    assert isinstance(result.final_output, str) and result.final_output


@pytest.fixture(scope="module")
def claude(gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.base_url, api_key="unused", max_retries=0, timeout=120)


def test_anthropic_tool_use_and_its_result(claude, model_id):
    """(A text answer and its stream: test_an_anthropic_stream_adds_up_to_the_same_message.)"""
    ask = [{"role": "user", "content": ASK}]
    tool = {"name": "get_weather", "input_schema": WEATHER["parameters"]}
    used = claude.messages.create(
        model=model_id,
        max_tokens=64,
        extra_body=ZERO,
        messages=ask,
        tools=[tool],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    (use,) = [b for b in used.content if b.type == "tool_use"]
    assert used.stop_reason == "tool_use" and use.name == "get_weather"
    jsonschema.validate(use.input, WEATHER["parameters"])
    answer = claude.messages.create(
        model=model_id,
        max_tokens=24,
        extra_body=ZERO,
        tools=[tool],
        messages=[
            *ask,
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in used.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21 C."}]},
        ],
    )
    # Anthropic's input_tokens leaves out what was read from the (prefix) cache: the prompt is their sum
    prompt = lambda usage: usage.input_tokens + (usage.cache_read_input_tokens or 0)
    assert answer.content and prompt(answer.usage) > prompt(used.usage)
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model=model_id, max_tokens=24, messages=[])


def _message_run_free(message: dict) -> dict:
    """A Message without what two runs of one greedy request may differ in (ids, the input's cache split), nor the
    null fields the anthropic client's models add."""
    content = [{k: v for k, v in block.items() if k != "id" and v is not None} for block in message["content"]]
    out = {k: v for k, v in message.items() if v is not None}
    return {**out, "id": None, "content": content, "usage": message["usage"]["output_tokens"]}


@pytest.mark.parametrize(
    "extra",
    [
        {"max_tokens": 40, "stop_sequences": ["sunshine", "Light"]},
        {
            "max_tokens": 64,
            "tools": [{"name": "get_weather", "input_schema": WEATHER["parameters"]}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        },
    ],
    ids=["stop_sequence", "one-tool_use"],
)
def test_an_anthropic_stream_adds_up_to_the_same_message(gateway, claude, model_id, extra):
    """Greedy: the raw events, in the published order, and the anthropic client's stream helper both add up to the
    Message the same request gets unstreamed; the stop is reported as Anthropic reports it."""
    body = {"model": model_id, "messages": [{"role": "user", "content": ASK}], **extra}
    made = claude.messages.create(**body, extra_body=ZERO).model_dump(mode="json")
    raw = named_events(
        httpx.post(f"{gateway.base_url}/v1/messages", json={**body, **ZERO, "stream": True}, timeout=120)
    )
    assert _message_run_free(messages_order(raw)) == _message_run_free(made)
    with claude.messages.stream(**body, extra_body=ZERO) as stream:
        accumulated = stream.get_final_message().model_dump(mode="json")
    assert _message_run_free(accumulated) == _message_run_free(made)
    if "stop_sequences" in extra:
        assert (made["stop_reason"], made["stop_sequence"]) == ("stop_sequence", "Light")
        assert [block["type"] for block in made["content"]] == ["text"] and "Light" not in made["content"][0]["text"]
    else:
        (use,) = made["content"]  # disable_parallel_tool_use: exactly one
        assert made["stop_reason"] == "tool_use" and made["stop_sequence"] is None and use["name"] == "get_weather"
        jsonschema.validate(use["input"], WEATHER["parameters"])
