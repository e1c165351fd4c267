"""The worker's prefix cache seen from the client: cached prompt tokens in the usage and in the gateway's metrics."""

from __future__ import annotations

import httpx
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
