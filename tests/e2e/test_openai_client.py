"""End to end through real HTTP: the official openai client → gateway → bundled worker → real model."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def chat(client, model_id, **kw):
    kw.setdefault("messages", ASK)
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 24)
    return client.chat.completions.create(model=model_id, **kw)


def merge_stream(chunks) -> dict:
    """Fold streamed deltas the way a client does."""
    content, reasoning, calls, finish, usage = "", "", {}, None, None
    for chunk in chunks:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            d = choice.delta
            content += d.content or ""
            reasoning += getattr(d, "reasoning_content", None) or ""
            for tc in d.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                if tc.id:
                    assert slot["id"] is None, "id sent twice"
                    slot["id"] = tc.id
                if tc.function and tc.function.name:
                    assert not slot["name"], "name sent twice"
                    slot["name"] = tc.function.name
                slot["arguments"] += (tc.function.arguments or "") if tc.function else ""
            finish = choice.finish_reason or finish
    return {
        "content": content,
        "reasoning": reasoning,
        "calls": [calls[i] for i in sorted(calls)],
        "finish": finish,
        "usage": usage,
    }


def test_models_lists_the_embedded_model(client, model_id):
    assert [m.id for m in client.models.list().data] == [model_id]


def test_plain_chat(client, model_id):
    r = chat(client, model_id, messages=[{"role": "user", "content": "What is the capital of France?"}], max_tokens=30)
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content and choice.message.content.strip()
    assert "<|im_end|>" not in choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_stream_equals_non_stream(client, model_id):
    whole = chat(client, model_id, max_tokens=40)
    merged = merge_stream(chat(client, model_id, max_tokens=40, stream=True))
    assert merged["content"] == whole.choices[0].message.content
    assert merged["finish"] == whole.choices[0].finish_reason


def test_max_tokens_gives_length(client, model_id):
    r = chat(client, model_id, max_tokens=3)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3


def test_stream_usage_with_include_usage(client, model_id):
    chunks = list(chat(client, model_id, max_tokens=5, stream=True, stream_options={"include_usage": True}))
    assert all(c.usage is None for c in chunks[:-1])
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 5
    assert last.usage.total_tokens == last.usage.prompt_tokens + 5


@pytest.mark.parametrize("stream", [False, True])
def test_forced_tool_call_has_schema_valid_arguments(client, model_id, stream):
    # one call, so the grammar ends the answer: a 135M model, free to go on, repeats calls to max_tokens
    r = chat(
        client,
        model_id,
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=60,
        stream=stream,
    )
    if stream:
        merged = merge_stream(r)
        calls, finish = [(c["id"], c["name"], c["arguments"]) for c in merged["calls"]], merged["finish"]
        content = merged["content"]
    else:
        msg = r.choices[0].message
        calls = [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls]
        finish, content = r.choices[0].finish_reason, msg.content
    assert calls and finish == "tool_calls"
    assert not content  # a forced call leaves no room for free text
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER_TOOL, TIME_TOOL)}
    for call_id, name, arguments in calls:
        assert call_id
        jsonschema.validate(json.loads(arguments), schemas[name])


def test_named_tool_choice_calls_that_tool_once(client, model_id):
    r = chat(
        client,
        model_id,
        tools=[WEATHER_TOOL, TIME_TOOL],
        max_tokens=60,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    calls = r.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_time"]
    jsonschema.validate(json.loads(calls[0].function.arguments), TIME_TOOL["function"]["parameters"])


def test_json_schema_response_format(client, model_id):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
        "additionalProperties": False,
    }
    r = chat(
        client,
        model_id,
        max_tokens=60,
        messages=[{"role": "user", "content": "Give the largest city of France and its population as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}},
    )
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_stop_string_ends_output_before_it(client, model_id):
    full = chat(client, model_id, max_tokens=40).choices[0].message.content
    words = full.split()
    assert len(words) > 3, full
    stop = words[2]
    cut = full.index(stop)
    for stream in (False, True):
        r = chat(client, model_id, max_tokens=40, stop=[stop], stream=stream)
        got = (
            merge_stream(r)
            if stream
            else {"content": r.choices[0].message.content, "finish": r.choices[0].finish_reason}
        )
        assert got["content"] == full[:cut]
        assert got["finish"] == "stop"


def test_n_choices(client, model_id):
    r = chat(client, model_id, n=2, max_tokens=4, temperature=0.8, seed=7)
    assert [c.index for c in r.choices] == [0, 1]


def test_tokenize_matches_prompt_usage(gateway, client, model_id):
    r = chat(client, model_id, max_tokens=2)
    body = httpx.post(f"{gateway.base_url}/tokenize", json={"model": model_id, "messages": ASK}).json()
    assert body["count"] == len(body["tokens"]) == r.usage.prompt_tokens
    text = httpx.post(f"{gateway.base_url}/detokenize", json={"model": model_id, "tokens": body["tokens"]}).json()
    assert "What is the weather in Paris right now?" in text["prompt"]


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=ASK)


@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"temperature": 9}, "temperature"),
        (
            {"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice.function.name",
        ),
        (
            {"tools": [TIME_TOOL, {"type": "function", "function": {"name": "f", "parameters": {"$ref": "#/nope"}}}]},
            "tools[1].function.parameters",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "wizard"}}}},
            "response_format.json_schema.schema.type",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nope"}}}},
            "response_format.json_schema.schema",
        ),
    ],
)
def test_bad_requests_are_400_with_param(client, model_id, kwargs, param):
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, model_id, **kwargs)
    assert info.value.body["param"] == param


def test_request_id_header(gateway, model_id):
    r = httpx.get(f"{gateway.base_url}/v1/models", headers={"x-request-id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    assert httpx.get(f"{gateway.base_url}/health").headers["x-request-id"]
