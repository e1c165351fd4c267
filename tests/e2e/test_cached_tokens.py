"""The worker's prefix cache seen from the client: cached prompt tokens in the usage and in the gateway's metrics."""

from __future__ import annotations

import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families


def _cached_counter(gateway) -> float:
    text = httpx.get(f"{gateway.base_url}/metrics").text
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "gateway:cached_prompt_tokens_total"
    )


def test_a_repeated_prompt_reports_its_cached_tokens(gateway, client, model_id):
    messages = [
        {"role": "system", "content": "You are a terse assistant for the prefix-cache test."},
        {"role": "user", "content": "Name one colour of the rainbow."},
    ]
    first = client.chat.completions.create(model=model_id, messages=messages, max_tokens=2, temperature=0)
    before = _cached_counter(gateway)
    second = client.chat.completions.create(model=model_id, messages=messages, max_tokens=2, temperature=0)
    prompt = second.usage.prompt_tokens
    assert first.usage.prompt_tokens_details.cached_tokens < prompt - 1  # a new system prompt: not all cached
    assert second.usage.prompt_tokens_details.cached_tokens == prompt - 1  # all but the last: its logits are needed
    assert _cached_counter(gateway) - before == prompt - 1


SYSTEM = "You are terse. This system prompt is the same on every door of the prefix-cache test."


def _events(response: httpx.Response) -> list:
    """The JSON of an SSE body's data lines ([DONE] as a string)."""
    lines = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def _door_usage(gateway, door: str, model: str) -> tuple[int, int]:
    """(prompt tokens, cached prompt tokens) as the door reports them, for one short request on it."""
    url, user = f"{gateway.base_url}/v1", {"role": "user", "content": f"Say one word for the {door} door."}
    if door == "chat-stream":
        body = {"model": model, "messages": [{"role": "system", "content": SYSTEM}, user], "max_tokens": 1}
        body |= {"stream": True, "stream_options": {"include_usage": True}}
        usage = _events(httpx.post(f"{url}/chat/completions", json=body, timeout=120))[-2]["usage"]
        return usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]
    if door == "completions":
        body = {"model": model, "prompt": f"{SYSTEM} {user['content']}", "max_tokens": 1}
        usage = httpx.post(f"{url}/completions", json=body, timeout=120).json()["usage"]
        return usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]
    if door == "responses":
        body = {"model": model, "instructions": SYSTEM, "input": [user], "max_output_tokens": 16, "store": False}
        usage = httpx.post(f"{url}/responses", json=body, timeout=120).json()["usage"]
        return usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"]
    body = {"model": model, "system": SYSTEM, "messages": [user], "max_tokens": 1}
    if door == "messages-stream":  # message_start's usage: sent once the backend said how much was cached
        events = _events(httpx.post(f"{url}/messages", json={**body, "stream": True}, timeout=120))
        usage = next(e for e in events if e["type"] == "message_start")["message"]["usage"]
    else:
        usage = httpx.post(f"{url}/messages", json=body, timeout=120).json()["usage"]
    return usage["input_tokens"] + usage["cache_read_input_tokens"], usage["cache_read_input_tokens"]


@pytest.mark.parametrize("door", ["chat-stream", "completions", "responses", "messages", "messages-stream"])
def test_every_door_reports_the_cached_prompt_tokens(gateway, model_id, door):
    first_prompt, first_cached = _door_usage(gateway, door, model_id)
    prompt, cached = _door_usage(gateway, door, model_id)
    assert prompt == first_prompt and first_cached < prompt - 1  # the door's own prompt: not all of it cached yet
    assert cached == prompt - 1  # all but the last token, whose logits choose the first output token
