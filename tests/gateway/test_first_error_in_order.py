"""With several bad top-level fields, the first error a chat, completions, Responses or Messages body gets is the one of the field read
first, whatever else is wrong: every neighbouring pair and seeded combinations of type and range errors, each checked against the error its
earliest field gets alone (the order below is the order the validators read the fields in)."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from gateway.errors import APIError
from gateway.validation.chat import parse_chat_completion
from gateway.validation.completions import parse_completion
from gateway.validation.messages import parse_messages_request
from gateway.validation.responses import parse_responses_request

CHAT_BAD: dict[str, Any] = {
    "model": 5,
    "functions": [{"name": "f"}],
    "modalities": ["audio"],
    "metadata": 5,
    "store": "yes",
    "safety_identifier": 5,
    "service_tier": "x",
    "verbosity": "x",
    "logit_bias": {"1": 2},
    "guided_json": {},
    "repetition_penalty": 1.5,
    "user": 5,
    "max_completion_tokens": 0,
    "max_tokens": "x",
    "stream": "x",
    "stream_options": 5,
    "top_p": 5,
    "top_k": "x",
    "min_tokens": -1,
    "n": 0,
    "stop": 5,
    "temperature": 9,
    "min_p": 2,
    "seed": "x",
    "frequency_penalty": 5,
    "presence_penalty": 5,
    "ignore_eos": 1,
    "skip_special_tokens": 1,
    "include_stop_str_in_output": 1,
    "logprobs": 1,
    "top_logprobs": 99,
    "tools": 5,
    "tool_choice": 5,
    "parallel_tool_calls": "x",
    "chat_template_kwargs": 5,
    "add_generation_prompt": "x",
    "continue_final_message": "x",
    "messages": 5,
    "response_format": 5,
    "reasoning_effort": "x",
    "add_special_tokens": "x",
}
"""A bad value of each field, in the order a chat body's fields are read."""
COMPLETION_BAD: dict[str, Any] = {
    "model": 5,
    "suffix": "x",
    "logit_bias": {"1": 2},
    "user": 5,
    "max_tokens": "x",
    "stream": "x",
    "top_p": 5,
    "top_k": "x",
    "n": 0,
    "temperature": 9,
    "seed": "x",
    "ignore_eos": 1,
    "best_of": 3,
    "logprobs": "x",
    "echo": "x",
    "prompt": 5,
    "add_special_tokens": "x",
}
"""The same for a completions body."""
RESPONSES_BAD: dict[str, Any] = {
    "model": 5,
    "background": True,
    "conversation": "c",
    "prompt": {"id": "p"},
    "truncation": "auto",
    "include": ["x"],
    "tools": 5,
    "tool_choice": 5,
    "text": 5,
    "reasoning": 5,
    "top_p": 5,
    "top_k": "x",
    "max_output_tokens": 1,
    "temperature": 9,
    "frequency_penalty": 5,
    "presence_penalty": 5,
    "top_logprobs": 99,
    "stream": "x",
    "parallel_tool_calls": "x",
    "input": 5,
    "instructions": 5,
    "store": "x",
    "previous_response_id": 5,
    "metadata": 5,
    "max_tool_calls": "x",
    "prompt_cache_key": 5,
    "prompt_cache_retention": "x",
    "safety_identifier": 5,
    "user": 5,
}
"""The same for a Responses body."""
MESSAGES_BAD: dict[str, Any] = {
    "model": 5,
    "mcp_servers": [{}],
    "container": "c",
    "top_p": 5,
    "top_k": "x",
    "max_tokens": "x",
    "stop_sequences": "x",
    "temperature": 9,
    "stream": "x",
    "metadata": 5,
    "service_tier": "zz",
    "tools": 5,
    "tool_choice": 5,
    "thinking": 5,
    "output_config": 5,
    "system": 5,
    "messages": 5,
}
"""The same for a Messages body."""
CHAT_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION_BODY = {"model": "m", "prompt": "hi"}
RESPONSES_BODY = {"model": "m", "input": "hi"}
MESSAGES_BODY = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}


def _error(parse: Any, body: dict[str, Any]) -> tuple[str, str | None]:
    with pytest.raises(APIError) as caught:
        parse(body)
    return caught.value.message, caught.value.param


@pytest.mark.parametrize(
    ("parse", "valid", "bad"),
    [
        (parse_chat_completion, CHAT_BODY, CHAT_BAD),
        (parse_completion, COMPLETION_BODY, COMPLETION_BAD),
        (parse_responses_request, RESPONSES_BODY, RESPONSES_BAD),
        (parse_messages_request, MESSAGES_BODY, MESSAGES_BAD),
    ],
    ids=["chat", "completions", "responses", "messages"],
)
def test_the_first_error_is_the_earliest_read_fields(parse: Any, valid: dict[str, Any], bad: dict[str, Any]):
    alone = {key: _error(parse, {**valid, key: value}) for key, value in bad.items()}
    assert all(param is not None and param.startswith(key) for key, (_, param) in alone.items()), alone
    order = list(bad)
    for earlier, later in itertools.pairwise(order):  # each neighbour pair: any reordering inverts one of them
        assert _error(parse, {**valid, earlier: bad[earlier], later: bad[later]}) == alone[earlier], (earlier, later)
    draw = random.Random(17)
    for _ in range(300):
        keys = draw.sample(order, draw.randint(2, 8))
        body = {**valid, **{key: bad[key] for key in keys}}
        first = min(keys, key=order.index)
        assert _error(parse, body) == alone[first], keys
