"""The gateway in front of the real bundled worker (SmolLM2-135M on CPU), over real HTTP: the worker process the
vLLM dialect's tests use too (`worker_url`, tests/conftest.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonschema
import pytest

from backends.checkpoint import EMBEDDED_MODEL_ID
from backends.sglang import SGLangBackend
from gateway.app import create_app
from gateway.models.registry import ModelRegistry, served_model_from_checkpoint
from tests.gateway.http_server import serve

ROOT = Path(__file__).resolve().parents[2]
MODEL = EMBEDDED_MODEL_ID
WAIT_S = 120  # upper bound for CPU generation; never a speed check
USER = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def client(worker_url, checkpoint) -> Iterator[httpx.Client]:
    model = served_model_from_checkpoint(MODEL, checkpoint, "hermes", SGLangBackend(worker_url, incremental=True))
    with serve(create_app(ModelRegistry([model]))) as base, httpx.Client(base_url=base, timeout=WAIT_S) as c:
        yield c


def chat(client: httpx.Client, **fields) -> httpx.Response:
    return client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "temperature": 0, **fields})


def test_greedy_stream_equals_answer(client):
    answer = chat(client, max_tokens=16).json()
    events = [
        json.loads(line[6:])
        for line in chat(client, max_tokens=16, stream=True).text.split("\n\n")
        if line.startswith("data: {")
    ]
    streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    assert answer["choices"][0]["message"]["content"] == streamed != ""
    assert "Paris" in streamed
    prompt = client.post("/tokenize", json={"model": MODEL, "messages": USER}).json()
    assert answer["usage"]["prompt_tokens"] == prompt["count"]


def test_required_tool_call_is_valid(client):
    body = chat(
        client,
        tools=[WEATHER],
        tool_choice="required",
        max_tokens=120,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
    ).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls", body
    (call,) = choice["message"]["tool_calls"][:1]
    assert call["function"]["name"] == "get_weather"
    jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER["function"]["parameters"])


def test_json_schema_response(client):
    schema = {
        "type": "object",
        "properties": {"capital": {"type": "string"}},
        "required": ["capital"],
        "additionalProperties": False,
    }
    body = chat(
        client, max_tokens=40, response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    ).json()
    assert body["choices"][0]["finish_reason"] == "stop", body
    jsonschema.validate(json.loads(body["choices"][0]["message"]["content"]), schema)


def test_completions_with_token_ids_and_logprobs(client):
    ids = client.post("/tokenize", json={"model": MODEL, "prompt": "The capital of France is"}).json()["tokens"]
    body = client.post(
        "/v1/completions", json={"model": MODEL, "prompt": ids, "max_tokens": 4, "temperature": 0, "logprobs": 2}
    ).json()
    choice = body["choices"][0]
    assert choice["text"] and len(choice["logprobs"]["tokens"]) == body["usage"]["completion_tokens"]
    assert all(lp <= 0 for lp in choice["logprobs"]["token_logprobs"])


def test_disconnect_frees_the_worker(client, worker_url):
    with client.stream(
        "POST",
        "/v1/chat/completions",
        json={"model": MODEL, "messages": USER, "stream": True, "max_tokens": 900, "ignore_eos": True},
    ) as r:
        events = (line for line in r.iter_lines() if line)
        next(events), next(events)  # the role chunk, then generated text: the worker is decoding
        assert _running(worker_url) == 1
    deadline = time.monotonic() + WAIT_S
    while _running(worker_url) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _running(worker_url) == 0


def _running(worker_url: str) -> int:
    return httpx.get(f"{worker_url}/get_server_info").json()["internal_states"][0]["running_requests"]
