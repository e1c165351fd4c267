"""SGLangBackend against a real HTTP server that speaks SGLang's published /generate contract."""

from __future__ import annotations

import httpx
import pytest

from backends.base import BackendError, GenerateRequest, Grammar, SamplingParams
from backends.http_backend import batch_chunk
from backends.sglang import SGLangBackend, _StreamReader, generate_payload
from tests.gateway.http_server import dead_url
from tests.gateway.sglang_contract import ContractError, api_types
from tests.gateway.sglang_standin import Script, fake_logprob

pytestmark = pytest.mark.anyio
WAIT_S = 30  # generous upper bound for an event that must happen; never a speed check


def request(rid: str = "r1", **sampling) -> GenerateRequest:
    return GenerateRequest(rid=rid, input_ids=[1, 2, 3], sampling=SamplingParams(max_new_tokens=16, **sampling))


async def collect(backend: SGLangBackend, req: GenerateRequest):
    return [chunk async for chunk in backend.generate(req)]


def test_payload_uses_sglang_names_only():
    req = GenerateRequest(
        rid="x",
        input_ids=[5, 6],
        sampling=SamplingParams(
            max_new_tokens=7,
            temperature=0.5,
            seed=42,
            stop_token_ids=[2],
            skip_special_tokens=False,
            min_new_tokens=3,
        ),
        grammar=Grammar("structural_tag", '{"type": "structural_tag"}'),
        logprobs=True,
        top_logprobs=3,
    )
    body = generate_payload(req)
    parsed = api_types.GenerateRequest.from_json_value(body)  # SGLang refuses unknown sampling keys
    assert parsed.sampling_params.max_new_tokens == 7
    assert parsed.sampling_params.sampling_seed == 42
    assert parsed.sampling_params.min_new_tokens == 3
    assert parsed.sampling_params.structural_tag == '{"type": "structural_tag"}'
    assert parsed.sampling_params.skip_special_tokens is False
    assert list(parsed.sampling_params.stop_token_ids) == [2]
    assert (parsed.input_ids, parsed.rid, parsed.stream, parsed.return_logprob, parsed.top_logprobs_num) == (
        [5, 6],
        "x",
        True,
        True,
        3,
    )


def test_standin_refuses_what_sglang_refuses(standin):
    _, url = standin
    with pytest.raises(ContractError):
        api_types.GenerateRequest.from_json_value({"input_ids": [1], "sampling_params": {"max_tokens": 3}})
    r = httpx.post(
        f"{url}/generate", json={"input_ids": [1], "stream": True, "rid": "a", "sampling_params": {"max_tokens": 3}}
    )
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]


async def test_stream_yields_only_new_ids_in_both_modes(standin):
    server, url = standin
    server.script = lambda body: Script(ids=[10, 11, 12, 2, 99])
    backend = SGLangBackend(url, incremental=server.incremental)
    chunks = await collect(backend, request(stop_token_ids=[2]))
    await backend.close()
    assert [i for c in chunks for i in c.output_ids] == [10, 11, 12, 2]  # events that arrive together join
    assert [c.finish_reason for c in chunks] == [None] * (len(chunks) - 1) + ["stop"]
    assert chunks[-1].matched_stop == 2
    assert chunks[-1].completion_tokens == 4 and chunks[-1].prompt_tokens == 3


@pytest.mark.parametrize("standin", [True], indirect=True)
async def test_a_delta_stream_read_as_cumulative_is_a_clear_error(standin):
    """A server streaming deltas (the bundled worker, SGLang's --incremental-streaming-output) configured without
    `incremental: true`: every id after the first event's was dropped in silence, the output cut short."""
    server, url = standin
    server.script = lambda body: Script(ids=[10, 11, 12, 2])
    backend = SGLangBackend(url, incremental=False)
    with pytest.raises(BackendError, match="set `incremental: true`"):
        await collect(backend, request(stop_token_ids=[2]))
    await backend.close()


async def test_length_finish_and_logprobs(standin):
    server, url = standin
    server.script = lambda body: Script(ids=[20, 21, 22, 23])
    backend = SGLangBackend(url, incremental=server.incremental)
    req = request()
    req.sampling.max_new_tokens = 3
    req.logprobs, req.top_logprobs = True, 2
    chunks = await collect(backend, req)
    await backend.close()
    assert chunks[-1].finish_reason == "length"
    entries = [e for c in chunks for e in c.logprobs]
    assert [(e.token_id, e.logprob) for e in entries] == [(t, fake_logprob(t)) for t in (20, 21, 22)]
    assert entries[0].top == [(20, fake_logprob(20)), (21, fake_logprob(20) - 1)]


async def test_refusal_keeps_its_status(standin):
    server, url = standin
    server.script = lambda body: Script(refuse=400)
    backend = SGLangBackend(url, incremental=server.incremental)
    with pytest.raises(BackendError) as e:
        await collect(backend, request())
    await backend.close()
    assert e.value.status == 400 and not e.value.retryable and "refused by the script" in str(e.value)


async def test_error_event_raises(standin):
    server, url = standin
    server.script = lambda body: Script(ids=[1, 2, 3], error_after=1)
    backend = SGLangBackend(url, incremental=server.incremental)
    seen = []
    with pytest.raises(BackendError, match="scripted failure"):
        async for chunk in backend.generate(request()):
            seen.append(chunk.output_ids)
    await backend.close()
    assert seen == [[1]]


async def test_unreachable_backend_is_retryable():
    backend = SGLangBackend(dead_url())
    with pytest.raises(BackendError) as e:
        await collect(backend, request())
    assert e.value.retryable and e.value.status == 503
    assert await backend.ready() is False
    await backend.close()


async def test_closing_the_stream_aborts_the_request(standin):
    server, url = standin
    server.script = lambda body: Script(ids=[5, 6, 7, 8], hold_after=2)
    backend = SGLangBackend(url, incremental=server.incremental)
    stream = backend.generate(request(rid="held"))
    assert (await anext(stream)).output_ids in ([5], [5, 6])  # the two events may arrive in one read
    await stream.aclose()
    await backend.close()  # waits for the best-effort abort call
    assert server.aborted["held"].wait(WAIT_S)
    assert server.closed["held"].wait(WAIT_S)


async def test_ready_follows_health(standin):
    server, url = standin
    backend = SGLangBackend(url)
    assert await backend.ready() is True
    server.healthy = False
    assert await backend.ready() is False
    await backend.close()


@pytest.mark.parametrize(("sent", "read"), [(7, 7), (0, 0), (None, 0), ("absent", 0), (3.0, 3), (True, 1), ("5", 5)])
def test_token_counts_read_as_int_of_what_came(sent, read) -> None:
    """An event's prompt, completion and cached counts are `int(value or 0)` of what the server sent (an int as it
    is, with no call per event)."""
    meta = {} if sent == "absent" else {"prompt_tokens": sent, "completion_tokens": sent, "cached_tokens": sent}
    chunk = _StreamReader(incremental=True)._chunk({"output_ids": [1], "meta_info": meta})
    assert (chunk.prompt_tokens, chunk.completion_tokens, chunk.cached_tokens) == (read, read, read)
    assert all(type(n) is int for n in (chunk.prompt_tokens, chunk.completion_tokens, chunk.cached_tokens))


def test_a_read_of_one_event_reads_as_the_same_event_among_others() -> None:
    """`batch_chunk` on a read of one event and its blank line (its fast path) gives what the general loop gives for
    the same lines: the chunk, an error event's BackendError beside no output, nothing for `[DONE]` or a blank."""
    event = b'data: {"output_ids":[5,6],"meta_info":{"completion_tokens":2,"finish_reason":null}}'
    lines_of = {
        "event": [event, b""],
        "error": [b'data: {"error":{"message":"boom","code":500}}', b""],
        "done": [b"data: [DONE]", b""],
        "blank": [b"", b""],
    }
    for name, lines in lines_of.items():
        fast = _StreamReader(incremental=True)
        general = _StreamReader(incremental=True)
        chunk, failure = batch_chunk(lines, fast.chunks, fast.ended)
        expected, expected_failure = batch_chunk([*lines, b""], general.chunks, general.ended)  # not one event
        assert chunk == expected, name
        assert (type(failure), str(failure)) == (type(expected_failure), str(expected_failure)), name
        assert (fast.done, fast.finished) == (general.done, general.finished), name
    chunk, _ = batch_chunk(lines_of["event"], _StreamReader(incremental=True).chunks, lambda: False)
    assert chunk is not None and chunk.output_ids == [5, 6] and chunk.completion_tokens == 2
    assert isinstance(
        batch_chunk(lines_of["error"], _StreamReader(incremental=True).chunks, lambda: False)[1], BackendError
    )
