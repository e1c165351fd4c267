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
    content, reasoning, calls, finish, stop_reason, usage = "", "", {}, None, None, None
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
            if choice.finish_reason:
                finish, stop_reason = choice.finish_reason, (choice.model_extra or {}).get("stop_reason")
    return {
        "content": content,
        "reasoning": reasoning,
        "calls": [calls[i] for i in sorted(calls)],
        "finish": finish,
        "stop_reason": stop_reason,
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
    assert merged["stop_reason"] is whole.choices[0].model_extra["stop_reason"] is None  # the EOS, or the length limit


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
        if stream:
            got = merge_stream(r)
        else:
            c = r.choices[0]
            got = {"content": c.message.content, "finish": c.finish_reason, "stop_reason": c.model_extra["stop_reason"]}
        assert (got["content"], got["finish"], got["stop_reason"]) == (full[:cut], "stop", stop)  # vLLM's stop_reason


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


def sse_data(gateway, path: str, body: dict) -> list[dict]:
    """The JSON of every frame of a stream, which must end with `[DONE]`."""
    with httpx.stream("POST", f"{gateway.base_url}{path}", json={**body, "stream": True}, timeout=120) as r:
        data = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert r.status_code == 200 and data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def test_tool_call_chunks_keep_the_published_types_and_fold_to_the_answer(gateway, model_id):
    """Every frame and the body parse as the openai client's types; a call's id, type and name come on its first
    chunk only; usage comes last with no choices; the chunks add up to the non-streamed message."""
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    body = {
        "model": model_id,
        "messages": ASK,
        "tools": [WEATHER_TOOL, TIME_TOOL],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "temperature": 0,
        "max_tokens": 40,
    }
    whole = ChatCompletion.model_validate(
        httpx.post(f"{gateway.base_url}/v1/chat/completions", json=body, timeout=120).json()
    )
    frames = sse_data(gateway, "/v1/chat/completions", {**body, "stream_options": {"include_usage": True}})
    chunks = [ChatCompletionChunk.model_validate(f) for f in frames]
    assert len({(c.id, c.created, c.model) for c in chunks}) == 1
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and (usage.prompt_tokens, usage.completion_tokens) == (
        whole.usage.prompt_tokens,
        whole.usage.completion_tokens,
    )  # (the second request finds the prompt cached)
    calls: dict[int, dict] = {}
    for chunk in chunks[:-1]:
        for call in chunk.choices[0].delta.tool_calls or ():
            first = call.index not in calls
            assert (call.id is not None, call.type is not None, call.function.name is not None) == (first,) * 3
            slot = calls.setdefault(call.index, {"id": call.id, "name": call.function.name, "arguments": ""})
            slot["arguments"] += call.function.arguments or ""
    message = whole.choices[0].message
    assert [(c["name"], c["arguments"]) for c in calls.values()] == [
        (t.function.name, t.function.arguments) for t in message.tool_calls
    ]
    assert whole.choices[0].finish_reason == "tool_calls" == chunks[-2].choices[0].finish_reason


def test_vllm_stop_extensions_through_completions(gateway, model_id):
    """vLLM's include_stop_str_in_output keeps the stop; min_tokens lets no stop end the first tokens."""
    body = {"model": model_id, "prompt": "a, b, c, d, e, f", "stop": ",", "max_tokens": 8, "temperature": 0}

    def text(**extra) -> tuple[str, int]:
        whole = httpx.post(f"{gateway.base_url}/v1/completions", json={**body, **extra}, timeout=120).json()
        streamed = "".join(
            c["text"] for f in sse_data(gateway, "/v1/completions", {**body, **extra}) for c in f["choices"]
        )
        assert whole["choices"][0]["text"] == streamed and whole["choices"][0]["finish_reason"] == "stop"
        return streamed, whole["usage"]["completion_tokens"]

    plain, tokens = text()
    assert "," not in plain
    assert text(include_stop_str_in_output=True) == (plain + ",", tokens)
    later, later_tokens = text(min_tokens=tokens + 1)
    assert later.startswith(plain + ",") and later_tokens > tokens
