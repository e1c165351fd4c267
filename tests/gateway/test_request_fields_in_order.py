"""The backend request's dataclasses are built positionally on the request path (fewer instructions than keywords):
each value lands in the field of its name."""

from __future__ import annotations

import asyncio
import dataclasses

from backends.base import Backend, GenerateChunk, GenerateRequest, Grammar, SamplingParams
from gateway.generation.choices import generate
from gateway.models.planning import sampling_params
from gateway.validation.fields import GenerationSettings


def test_sampling_params_take_each_setting_under_its_own_name():
    settings = GenerationSettings(
        temperature=0.25, top_p=0.5, top_k=7, min_p=0.125, seed=11, frequency_penalty=0.75, presence_penalty=-0.5,
        min_tokens=3,
    )  # fmt: skip
    assert sampling_params(settings, 9, (4, 5), False) == SamplingParams(
        max_new_tokens=9,
        temperature=0.25,
        top_p=0.5,
        top_k=7,
        min_p=0.125,
        seed=11,
        stop_token_ids=[4, 5],
        ignore_eos=False,
        frequency_penalty=0.75,
        presence_penalty=-0.5,
        skip_special_tokens=False,
        min_new_tokens=3,
    )
    assert sampling_params(dataclasses.replace(settings, ignore_eos=True), 9, (4, 5), True).stop_token_ids == []


class _Recording(Backend):
    def __init__(self) -> None:
        self.requests: list[GenerateRequest] = []

    async def generate(self, request: GenerateRequest):
        self.requests.append(request)
        yield GenerateChunk([], finish_reason="length")

    async def ready(self) -> bool:
        return True


def test_each_choices_backend_request_holds_its_own_fields(tokenize_only):
    backend = _Recording()
    model = dataclasses.replace(tokenize_only, backend=backend)
    sampling = SamplingParams(max_new_tokens=5, seed=1)
    grammar = Grammar("regex", "a+")
    settings = GenerationSettings(n=2, logprobs=True, top_logprobs=3)

    async def run() -> None:
        events = generate(model, "chatcmpl-x", [([1, 2, 3], sampling)], settings, grammar)
        async for _ in events:
            pass

    asyncio.run(run())
    first, second = sorted(backend.requests, key=lambda r: r.rid)
    assert first == GenerateRequest(
        rid="chatcmpl-x-0",
        input_ids=[1, 2, 3],
        sampling=sampling,
        grammar=grammar,
        logprobs=True,
        top_logprobs=3,
        vocab_size=model.vocab_size,
    )
    assert (second.rid, second.sampling.seed, second.logprobs, second.top_logprobs) == ("chatcmpl-x-1", 2, True, 3)
