"""SGLang's /generate body as the worker validates it: integral floats are integers, 1.5 and booleans are not."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import Request

from backends.asgi import BODY_TIMED_OUT
from backends.worker import protocol
from backends.worker.protocol import ProtocolError, parse_generate

PROMPT = [504, 3575, 282, 4649, 314]


def parse(body: dict):
    def no_text(text: str) -> list[int]:
        raise AssertionError("the tests send token ids")

    return parse_generate(body, vocab_size=49152, context_length=2048, encode=no_text)


def test_integral_floats_are_taken_as_integers():
    call = parse(
        {
            "input_ids": [float(i) for i in PROMPT],
            "sampling_params": {
                "max_new_tokens": 16.0,
                "min_new_tokens": 2.0,
                "top_k": 5.0,
                "stop_token_ids": [2.0],
                "sampling_seed": 7.0,
                "n": 1.0,
                "repetition_penalty": 1,
            },
            "top_logprobs_num": 3.0,
        }
    )
    assert call.input_ids == PROMPT and all(type(i) is int for i in call.input_ids)
    s = call.sampling
    assert (s.max_new_tokens, s.top_k, s.stop_token_ids, s.seed) == (16, 5, [2], 7)
    assert all(type(v) is int for v in (s.max_new_tokens, s.top_k, s.seed, call.min_new_tokens, call.top_logprobs_num))


@pytest.mark.parametrize(
    "sampling, message",
    [
        ({"max_new_tokens": 1.5}, "sampling_params.max_new_tokens must be an integer, got 1.5"),
        ({"max_new_tokens": True}, "sampling_params.max_new_tokens must be an integer, got True"),
        ({"top_k": False}, "sampling_params.top_k must be an integer"),
        ({"min_new_tokens": "2"}, "sampling_params.min_new_tokens must be an integer"),
        ({"sampling_seed": 0.5}, "sampling_seed must be an integer"),
        ({"sampling_seed": 1 << 63}, "sampling_seed must be a 64-bit signed integer"),
        ({"stop_token_ids": [2.5]}, "stop_token_ids must be a list of integers"),
        ({"stop_token_ids": [True]}, "stop_token_ids must be a list of integers"),
        ({"n": True}, "sampling_params.n is not supported"),
        ({"repetition_penalty": True}, "sampling_params.repetition_penalty is not supported"),
    ],
)
def test_fractions_and_booleans_are_refused(sampling, message):
    with pytest.raises(ProtocolError, match=message.replace(".", r"\.")):
        parse({"input_ids": PROMPT, "sampling_params": sampling})


@pytest.mark.parametrize(
    "body, message",
    [
        ({"sampling_params": []}, "sampling_params must be an object"),
        ({"sampling_params": 0}, "sampling_params must be an object"),
        ({"sampling_params": {"stop_token_ids": ""}}, "stop_token_ids must be a list of integers"),
        ({"sampling_params": {"stop_token_ids": 0}}, "stop_token_ids must be a list of integers"),
        ({"top_logprobs_num": 21}, r"top_logprobs_num must be in \[0, 20\]"),
    ],
)
def test_empty_values_of_the_wrong_type_are_refused(body, message):
    with pytest.raises(ProtocolError, match=message):
        parse({"input_ids": PROMPT, **body})
    assert parse({"input_ids": PROMPT, "sampling_params": None, "top_logprobs_num": 20}).sampling.stop_token_ids == []


@pytest.mark.parametrize("ids", [[1.5], [True], [[1]]])
def test_input_ids_must_be_integers(ids):
    with pytest.raises(ProtocolError, match="input_ids must be a list of integers"):
        parse({"input_ids": ids})


def test_negative_seeds_are_taken_as_sglang_takes_them():
    # OpenAI's seed is any int64, and the gateway derives choice j's seed by wrapping seed + j in int64.
    for seed in (-1, -(1 << 63)):
        assert parse({"input_ids": PROMPT, "sampling_params": {"sampling_seed": seed}}).sampling.seed == seed


@pytest.mark.parametrize("max_new", [2044, 4096])
def test_an_explicit_max_new_tokens_past_the_context_is_refused_as_sglang_refuses_it(max_new):
    with pytest.raises(
        ProtocolError, match=f"maximum context length of 2048 tokens. You requested a total of {5 + max_new}"
    ):
        parse({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": max_new}})


def test_a_prompt_and_max_new_tokens_that_fill_the_context_or_a_default_past_it_are_taken():
    assert parse({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2043}}).sampling.max_new_tokens == 2043
    assert parse({"input_ids": [1] * 2000}).sampling.max_new_tokens == 128  # SGLang caps an absent one instead


@pytest.mark.parametrize(
    "body",
    [
        {"text": "Paris", "sampling_params": {"temperature": -1}},
        {"text": "Paris", "sampling_params": {"json_schema": "{}", "regex": "a"}},
        {"text": "Paris", "top_logprobs_num": 99},
        {"text": "Paris", "stream": "yes"},
        {"text": "Paris", "sampling_params": {"stop": [""]}},
    ],
)
def test_a_text_prompt_is_not_encoded_when_a_cheap_check_refuses_the_body(body):
    encoded = []
    with pytest.raises(ProtocolError):
        parse_generate(body, vocab_size=49152, context_length=2048, encode=lambda text: encoded.append(text) or [1])
    assert encoded == []


def _request(messages: asyncio.Queue, **scope) -> Request:
    return Request({"type": "http", "method": "POST", "headers": [], **scope}, messages.get)


@pytest.mark.parametrize(("scope", "status"), [({}, 499), ({BODY_TIMED_OUT: True}, 408)])
def test_a_body_cut_short_is_recorded_as_408_when_the_server_cut_it_for_stalling_else_499(scope, status):
    """The HTTP protocol answers a stalled body 408 itself and marks the scope: the worker's answer (what its
    records see) says 408 too, as the gateway's does; a client that just left is a 499."""

    async def scenario() -> int:
        messages = asyncio.Queue()
        messages.put_nowait({"type": "http.request", "body": b'{"input_ids": [1,', "more_body": True})
        messages.put_nowait({"type": "http.disconnect"})
        with pytest.raises(ProtocolError) as refused:
            await protocol.request_json(_request(messages, **scope))
        return refused.value.status

    assert asyncio.run(scenario()) == status
    assert protocol.BODIES.held == 0


def test_bodies_past_the_bytes_read_at_once_are_refused_with_503_and_their_bytes_given_back(monkeypatch):
    monkeypatch.setattr(protocol, "BODIES", protocol.BodyBytes(limit=25))

    async def scenario() -> tuple[int, int, object]:
        first, second = asyncio.Queue(), asyncio.Queue()
        first.put_nowait({"type": "http.request", "body": b'{"input_ids": [1,', "more_body": True})
        reading = asyncio.create_task(protocol.request_json(_request(first)))
        await asyncio.sleep(0)
        second.put_nowait({"type": "http.request", "body": b'{"text": "a"}', "more_body": False})
        with pytest.raises(ProtocolError) as refused:
            await protocol.request_json(_request(second))
        held = protocol.BODIES.held
        first.put_nowait({"type": "http.request", "body": b" 2]}", "more_body": False})
        return refused.value.status, held, await reading

    assert asyncio.run(scenario()) == (503, 17, {"input_ids": [1, 2]})
    assert protocol.BODIES.held == 0


def test_an_overlong_prompt_stop_id_or_stop_list_is_refused_before_its_ids_are_read():
    """Each id of a 64 MiB body was read on the event loop (~4 CPU-s) before its length was checked: a list
    holding a non-integer shows the length is checked first."""
    with pytest.raises(ProtocolError, match="the prompt has 2048 tokens; this model's context length is 2048"):
        parse({"input_ids": [*PROMPT, "x"] * 341 + [1, 2]})
    with pytest.raises(ProtocolError, match="stop_token_ids may hold at most 49152 ids"):
        parse({"input_ids": PROMPT, "sampling_params": {"stop_token_ids": ["x"] + [1] * 49152}})
    with pytest.raises(ProtocolError, match="at most 32 stop strings are allowed, got 33"):
        parse({"input_ids": PROMPT, "sampling_params": {"stop": [1] * 33}})
