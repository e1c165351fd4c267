"""VLLMBackend end to end against the real worker (the embedded model), in both vLLM APIs."""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest

from backends.base import BackendError, GenerateChunk, GenerateRequest, Grammar, MalformedStream, SamplingParams
from backends.sglang import SGLangBackend
from backends.vllm import VLLMBackend, _StreamReader
from tests.backends.conftest import CONTEXT
from tests.gateway.http_server import dead_url

pytestmark = pytest.mark.anyio
PROMPT = [504, 3575, 282, 4649, 314]  # "The capital of France is"
# "<|im_start|>user\nAnswer in JSON: is Paris in France?<|im_end|>\n<|im_start|>assistant\n"
CHAT = [1, 4093, 198, 21350, 281, 20110, 42, 314, 7042, 281, 4649, 47, 2, 198, 1, 520, 9531, 198]
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
APIS = ["completions", "generate"]


def request(
    prompt: list[int] = PROMPT, rid: str = "r", grammar: Grammar | None = None, top_logprobs: int = 0, **sampling
) -> GenerateRequest:
    sampling.setdefault("max_new_tokens", 6)
    sampling.setdefault("temperature", 0.0)
    return GenerateRequest(
        rid=rid,
        input_ids=prompt,
        sampling=SamplingParams(**sampling),
        grammar=grammar,
        logprobs=top_logprobs > 0,
        top_logprobs=top_logprobs,
    )


async def collect(backend, req: GenerateRequest) -> list[GenerateChunk]:
    try:
        return [chunk async for chunk in backend.generate(req)]
    finally:
        await backend.close()


def ids(chunks: list[GenerateChunk]) -> list[int]:
    return [i for c in chunks for i in c.output_ids]


def outcome(chunks: list[GenerateChunk]) -> tuple:
    """Everything the gateway reads from a generation."""
    last = chunks[-1]
    logprobs = [
        (e.token_id, round(e.logprob, 4), [(i, round(lp, 4)) for i, lp in e.top])
        for c in chunks
        for e in c.logprobs or ()
    ]
    return ids(chunks), last.finish_reason, last.matched_stop, last.prompt_tokens, last.completion_tokens, logprobs


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    "case",
    [
        {},
        {"top_logprobs": 3},
        {"stop_token_ids": [30]},
        {"prompt": CHAT, "max_new_tokens": 24},
        {"prompt": CHAT, "grammar": Grammar("json_schema", json.dumps(SCHEMA)), "max_new_tokens": 20},
        {"grammar": Grammar("regex", " (Paris|Lyon)\\."), "max_new_tokens": 10},
    ],
    ids=["length", "logprobs", "stop-id", "chat", "json-eos", "regex"],
)
async def test_greedy_output_equals_the_sglang_dialect(worker_url, api, case):
    vllm = outcome(await collect(VLLMBackend(worker_url, api=api), request(rid=f"v-{api}", **case)))
    sglang = outcome(await collect(SGLangBackend(worker_url, incremental=True), request(rid=f"s-{api}", **case)))
    assert vllm == sglang
    assert vllm[0], "the model generated something"


@pytest.mark.parametrize("api", APIS)
async def test_grammar_stop_ids_and_length_are_honoured(worker_url, tokenizer, api):
    backend = VLLMBackend(worker_url, api=api)
    schema = Grammar("json_schema", json.dumps(SCHEMA))
    out = await collect(backend, request(CHAT, grammar=schema, max_new_tokens=20))
    assert isinstance(json.loads(tokenizer.decode(ids(out)[:-1]))["ok"], bool)
    assert out[-1].finish_reason == "stop" and out[-1].matched_stop == ids(out)[-1]
    regex = await collect(VLLMBackend(worker_url, api=api), request(grammar=Grammar("regex", " (Paris|Lyon)\\.")))
    assert re.fullmatch(r" (Paris|Lyon)\.", tokenizer.decode(ids(regex)[:-1]))
    stopped = await collect(VLLMBackend(worker_url, api=api), request(stop_token_ids=[30], max_new_tokens=20))
    assert (ids(stopped)[-1], stopped[-1].finish_reason, stopped[-1].matched_stop) == (30, "stop", 30)
    capped = await collect(VLLMBackend(worker_url, api=api), request(max_new_tokens=3, ignore_eos=True))
    assert (len(ids(capped)), capped[-1].finish_reason, capped[-1].matched_stop) == (3, "length", None)
    assert [len(c.output_ids) for c in capped] == [1, 1, 1]


def _running(worker_url: str) -> int:
    return httpx.get(f"{worker_url}/get_server_info").json()["internal_states"][0]["running_requests"]


def _wait_until_idle(worker_url: str) -> int:
    """Running requests once the worker has settled (polls; the disconnect is noticed asynchronously)."""
    for _ in range(200):
        if _running(worker_url) == 0:
            break
        time.sleep(0.05)
    return _running(worker_url)


@pytest.mark.parametrize("api", APIS)
async def test_closing_the_stream_aborts_and_frees_the_slot(worker_url, api):
    backend = VLLMBackend(worker_url, api=api)
    stream = backend.generate(request(rid=f"held-{api}", max_new_tokens=CONTEXT - 10, ignore_eos=True))
    assert len((await anext(stream)).output_ids) == 1
    assert _running(worker_url) == 1
    await stream.aclose()
    await backend.close()
    # in a thread: the event loop must keep running to finish closing the stream's connection
    assert await asyncio.to_thread(_wait_until_idle, worker_url) == 0


async def test_a_server_side_abort_is_a_retryable_error(worker_url):
    backend = VLLMBackend(worker_url)
    stream = backend.generate(request(rid="killed", max_new_tokens=CONTEXT - 10, ignore_eos=True))
    await anext(stream)
    async with httpx.AsyncClient() as client:  # the worker names the request as vLLM does: cmpl-<request_id>
        assert (await client.post(f"{worker_url}/abort_request", json={"rid": "cmpl-killed"})).status_code == 200
    with pytest.raises(BackendError, match="aborted") as e:
        async for _ in stream:
            pass
    await backend.close()
    assert e.value.retryable and e.value.status == 503


@pytest.mark.parametrize("api", APIS)
async def test_refusals_keep_their_status(worker_url, api):
    with pytest.raises(BackendError) as e:
        await collect(VLLMBackend(worker_url, api=api), request(grammar=Grammar("regex", "((")))
    assert (e.value.status, e.value.retryable) == (400, False) and "invalid regex" in str(e.value)
    with pytest.raises(BackendError) as e:
        await collect(VLLMBackend(worker_url, api=api), request(prompt=[1] * CONTEXT))
    assert e.value.status == 400 and "context length" in str(e.value)
    with pytest.raises(BackendError) as e:
        await collect(VLLMBackend(worker_url, api=api, model="no-such-model"), request())
    assert (e.value.status, e.value.retryable) == (404, False) and "no-such-model" in str(e.value)


async def test_model_is_discovered_once_and_ready_follows_health(worker_url):
    backend = VLLMBackend(worker_url)
    assert await backend.ready() is True
    assert (await backend.model()).endswith(".gguf")
    assert await backend.model() is await backend.model()
    await backend.close()


async def test_unreachable_backend_is_retryable():
    dead = dead_url()
    for backend in (VLLMBackend(dead), VLLMBackend(dead, model="m")):
        with pytest.raises(BackendError) as e:
            await collect(backend, request())
        assert e.value.retryable and e.value.status == 503
    assert await VLLMBackend(dead).ready() is False


@pytest.mark.parametrize(
    "events",
    [
        [b'data: {"choices": [{"index": 0, "text": "x"}]}'],  # no token_ids
        [b'data: {"choices": [{"index": 1, "token_ids": [5]}]}'],
        [b'data: {"choices": [{"index": 0, "token_ids": ["5"]}]}'],
        [b'data: {"choices": [{"index": 0, "token_ids": [5], "finish_reason": "exploded"}]}'],
        [b'data: {"usage": {"prompt_tokens": 5, "completion_tokens": 1}}'],
        [b'data: {"choices": [{"index": 0, "token_ids": [5], "finish_reason": "length"}]}'] * 2,
        [b'data: {"choices": [{"index": 0, "token_ids": [5], "logprobs": {"token_logprobs": []}}]}'],
    ],
    ids=["no-token-ids", "other-choice", "not-ids", "unknown-finish", "early-usage", "after-finish", "logprobs"],
)
async def test_a_stream_that_breaks_vllms_protocol_is_a_malformed_stream(events):
    """What the router moves to another replica before any output (a refusal of the request would not be)."""
    reader = _StreamReader("completions", request())
    with pytest.raises(MalformedStream):
        for line in events:
            reader.line(line)
