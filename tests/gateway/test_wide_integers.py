"""An integer past 64 bits anywhere in a body (orjson, the body's parser, would make it a float: a changed value,
e.g. a schema's `const` enforced as 1.2345678901234568e22) is a 400 `integer_too_large` naming its place, over
real HTTP; 64-bit integers, large floats and long digit strings pass as they are."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import httpx
import pytest

from backends.exact_json import WideInteger, loads
from backends.sglang import SGLangBackend
from gateway.app import create_app
from gateway.models.registry import ModelRegistry
from tests.gateway.http_server import serve
from tests.gateway.test_app import MODEL, USER, WAIT_S

WIDE = 12345678901234567890123


@pytest.fixture
def client(standin, tokenize_only) -> Iterator[httpx.Client]:
    _, url = standin
    model = dataclasses.replace(tokenize_only, backend=SGLangBackend(url))
    with serve(create_app(ModelRegistry([model]))) as base, httpx.Client(base_url=base, timeout=WAIT_S) as client:
        yield client


def tool(schema: dict) -> list[dict]:
    return [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": schema}}}]


CALLED = [
    *USER,
    {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": f'{{"a": {WIDE}}}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": tool({"a": {"const": WIDE}})}, "tools[0].function.parameters.properties.a.const"),
        ({"tools": tool({"a": {"enum": [1, -WIDE]}})}, "tools[0].function.parameters.properties.a.enum[1]"),
        (
            {"tools": tool({"a": {"type": "integer", "minimum": 1 << 64}})},
            "tools[0].function.parameters.properties.a.minimum",
        ),
        ({"seed": 1 << 64}, "seed"),
        ({"seed": -(1 << 63) - 1}, "seed"),
        ({"max_tokens": WIDE}, "max_tokens"),
        ({"logit_bias": {"15": WIDE}}, "logit_bias.15"),
        ({"messages": CALLED}, "messages[1].tool_calls[0].function.arguments"),
    ],
)
def test_an_integer_past_64_bits_is_a_400_naming_it(client, extra, param):
    r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, **extra})
    error = r.json()["error"]
    assert r.status_code == 400 and (error["code"], error["param"]) == ("integer_too_large", param), error
    assert "past 64 bits" in error["message"]


def test_the_messages_door_names_it_in_anthropics_shape(client):
    schema = {"type": "object", "properties": {"a": {"const": WIDE}}}
    body = {"model": MODEL, "max_tokens": 8, "messages": USER, "tools": [{"name": "f", "input_schema": schema}]}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = client.post(path, json={k: v for k, v in body.items() if path == "/v1/messages" or k != "max_tokens"})
        assert r.status_code == 400 and r.json()["type"] == "error"
        assert r.json()["error"]["message"].startswith("'tools[0].input_schema.properties.a.const' is an integer")


def test_64_bit_integers_large_floats_and_digit_strings_keep_their_values():
    text = f'{{"a": {(1 << 64) - 1}, "b": {-(1 << 63)}, "c": 1e22, "d": "{WIDE}", "e": 0.{WIDE}}}'
    assert (
        loads(text)
        == loads(text.encode())
        == {"a": (1 << 64) - 1, "b": -(1 << 63), "c": 1e22, "d": str(WIDE), "e": float(f"0.{WIDE}")}
    )


@pytest.mark.parametrize(
    ("text", "place"),
    [(str(WIDE), ""), (f'{{"a": [1, {{"b": {WIDE}}}]}}', "a[1].b"), (f"[1e22, {1 << 64}]", "[1]")],
)
def test_the_place_of_a_wide_integer(text, place):
    with pytest.raises(WideInteger) as caught:
        loads(text)
    assert caught.value.place == place


def test_a_wide_integer_nested_past_the_stdlib_parsers_depth_is_still_refused():
    """orjson reads 1024 levels, the stdlib parser (which keeps integers exact) fewer: the float orjson made names it."""
    with pytest.raises(WideInteger) as caught:
        loads("[" * 1020 + str(WIDE) + "]" * 1020)
    assert caught.value.place == "[0]" * 1020
