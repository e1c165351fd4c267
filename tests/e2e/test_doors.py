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


def test_response_and_its_stream(gateway, client, model_id):
    response = respond(client, model_id)
    assert response.status in ("completed", "incomplete") and response.output_text
    r = httpx.post(
        f"{gateway.base_url}/v1/responses",
        json={"model": model_id, "input": ASK, "temperature": 0, "max_output_tokens": 16, "stream": True},
        timeout=120,
    )
    events = named_events(r)
    for event in events:
        check_event(event)
    final = events[-1]["response"]
    check_response(final)
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == response.output_text == final["output"][0]["content"][0]["text"]  # temperature 0: the same text


def test_forced_function_call(client, model_id):
    response = respond(
        client, model_id, max_output_tokens=64, tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"}
    )
    assert response.status == "completed"
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])


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


def test_anthropic_message_stream_and_tool_use(claude, model_id):
    ask = [{"role": "user", "content": ASK}]
    message = claude.messages.create(model=model_id, max_tokens=16, messages=ask, extra_body=ZERO)
    assert message.content[0].type == "text" and message.stop_reason in ("end_turn", "max_tokens")
    with claude.messages.stream(model=model_id, max_tokens=16, messages=ask, extra_body=ZERO) as s:
        assert "".join(s.text_stream) == message.content[0].text

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
