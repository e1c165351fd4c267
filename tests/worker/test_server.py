"""The worker as a real process on a free port, spoken to over HTTP in SGLang's dialect."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from backends.checkpoint import load_checkpoint
from backends.client_timeouts import MAX_HEAD_BYTES
from backends.worker.protocol import MAX_BODY_BYTES
from gateway.process.supervisor import WorkerProcess, WorkerSpec
from tests.dashboard import exposed_families, queried_metrics
from tests.gateway.http_server import head_refusal
from tests.gateway.sglang_contract import api_types

ROOT = Path(__file__).resolve().parents[2]
CONTEXT = 2048  # long enough that a 1000-token generation holds its slot while a test looks
PROMPT = [504, 3575, 282, 4649, 314]  # "The capital of France is"
PROMPT_COUNTING = [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28]  # "1, 2, 3, 4,"


@pytest.fixture(scope="module")
def base_url():
    worker = WorkerProcess(WorkerSpec(threads=2, max_batch=2, max_waiting=1, context_length=CONTEXT))
    try:
        yield worker.wait_ready()
    finally:
        worker.stop()


@pytest.fixture
def client(base_url):
    with httpx.Client(base_url=base_url, timeout=120) as c:
        yield c


def _sse(response: httpx.Response) -> Iterator[str]:
    """The non-empty lines of an SSE body, as one iterator to share between readers."""
    return (line for line in response.iter_lines() if line)


def _first_event(lines: Iterator[str]) -> dict:
    return json.loads(next(lines).removeprefix("data: "))


def _events(lines: Iterator[str]) -> list:
    """The JSON payloads of the remaining events; the stream must end with [DONE]."""
    rest = list(lines)
    assert rest[-1] == "data: [DONE]"
    return [json.loads(line.removeprefix("data: ")) for line in rest[:-1]]


def _running(client: httpx.Client) -> int:
    return client.get("/get_server_info").json()["internal_states"][0]["running_requests"]


def test_health_and_model_info(client):
    assert client.get("/health").status_code == 200
    assert client.get("/get_model_info").json()["model_path"].endswith(".gguf")
    assert client.get("/get_server_info").json()["internal_states"][0]["threads"] == 2  # --threads 2: fixed


def test_stream_sends_one_event_per_token_with_deltas(client):
    body = {
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": 4, "temperature": 0},
        "stream": True,
        "rid": "stream-1",
    }
    with client.stream("POST", "/generate", json=body) as response:
        assert response.status_code == 200
        events = _events(_sse(response))
    assert [len(e["output_ids"]) for e in events] == [1, 1, 1, 1]
    assert [e["meta_info"]["completion_tokens"] for e in events] == [1, 2, 3, 4]
    assert all(e["meta_info"]["finish_reason"] is None for e in events[:-1])
    last = events[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 4}
    assert (last["id"], last["prompt_tokens"], last["cached_tokens"]) == ("stream-1", 5, 0)
    assert "Paris" in "".join(e["text"] for e in events)


def test_non_stream_returns_everything_with_logprobs(client):
    body = {
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": 3.0, "temperature": 0},  # an integral float is an integer
        "return_logprob": True,
        "top_logprobs_num": 2,
    }
    out = client.post("/generate", json=body).json()
    meta = out["meta_info"]
    assert len(out["output_ids"]) == 3 and "Paris" in out["text"]
    assert [entry[1] for entry in meta["output_token_logprobs"]] == out["output_ids"]
    assert len(meta["output_top_logprobs"]) == 3 and len(meta["output_top_logprobs"][0]) == 2


def test_return_text_in_logprobs_gives_each_token_its_text(client):
    """SGLang's `return_text_in_logprobs`: each entry's third element is its token decoded alone (null without it)."""
    tokenizer = load_checkpoint().tokenizer  # the worker's default model
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2, "temperature": 0}, "return_logprob": True}
    body |= {"top_logprobs_num": 2, "return_text_in_logprobs": True}
    meta = client.post("/generate", json=body).json()["meta_info"]
    entries = meta["output_token_logprobs"] + [entry for top in meta["output_top_logprobs"] for entry in top]
    assert all(text == tokenizer.decode([i], skip_special_tokens=False) for _, i, text in entries)
    assert "".join(text for _, _, text in meta["output_token_logprobs"]).startswith(" Paris")
    response = client.post("/generate", json={**body, "return_text_in_logprobs": 1})
    assert response.status_code == 400 and "return_text_in_logprobs" in response.json()["error"]["message"]


def test_json_schema_through_http(client):
    schema = json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
    body = {
        "text": "<|im_start|>user\nAnswer in JSON.<|im_end|>\n<|im_start|>assistant\n",
        "sampling_params": {"max_new_tokens": 30, "temperature": 0, "json_schema": schema},
    }
    out = client.post("/generate", json=body).json()
    assert isinstance(json.loads(out["text"])["ok"], bool)
    assert out["meta_info"]["finish_reason"]["type"] == "stop"


@pytest.mark.parametrize(
    "body, message",
    [
        ({"input_ids": PROMPT, "sampling_params": {"max_tokens": 4}}, "max_tokens"),
        ({"input_ids": PROMPT, "sampling_params": {"regex": "(("}}, "invalid regex"),
        ({"input_ids": PROMPT, "sampling_params": {"regex": "a", "ebnf": 'root ::= "a"'}}, "only one"),
        ({"input_ids": [1] * CONTEXT, "sampling_params": {}}, "context length"),
        ({"input_ids": PROMPT, "sampling_params": {"temperature": -1}}, "temperature"),
        ({"input_ids": PROMPT, "sampling_params": {"stop": ["\n", ""]}}, "must not be empty"),
        ({"input_ids": PROMPT, "sampling_params": {"stop": ["x"] * 33}}, "at most 32"),
        ({"input_ids": PROMPT, "sampling_params": {"stop": "x" * 257}}, "at most 256"),
        ({"input_ids": PROMPT, "sampling_params": {"stop": [1]}}, "list of strings"),
        ({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2, "min_new_tokens": 3}}, "min_new_tokens"),
        ({"input_ids": PROMPT, "sampling_params": {"stop_token_ids": [10**6]}}, "stop_token_ids"),
        ({"input_ids": PROMPT, "sampling_params": {"stop_regex": "a"}}, "not supported"),
        ({"input_ids": PROMPT, "bogus": 1}, "bogus"),
        (
            {"input_ids": PROMPT, "return_logprob": True, "top_logprobs_num": 10**5},
            "top_logprobs_num must be in [0, 20]",
        ),
        ({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1.5}}, "max_new_tokens must be an integer"),
        ({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": True}}, "max_new_tokens must be an integer"),
    ],
)
def test_bad_requests_get_400(client, body, message):
    response = client.post("/generate", json=body)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]


def test_a_second_request_with_a_running_rid_is_refused_while_the_first_compiles_its_grammar(base_url):
    properties = {f"p{i}": {"type": "string", "pattern": "[a-z]{3,9}"} for i in range(10)}
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    sampling = {"max_new_tokens": 20, "temperature": 0, "json_schema": json.dumps(schema)}
    body = {"input_ids": PROMPT, "sampling_params": sampling, "rid": "same-rid"}

    async def both() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=base_url, timeout=120) as c:
            return await asyncio.gather(c.post("/generate", json=body), c.post("/generate", json=body))

    answers = sorted(asyncio.run(both()), key=lambda r: r.status_code)
    assert [r.status_code for r in answers] == [200, 400]
    assert "already running" in answers[1].json()["error"]["message"]


COUNTING = "1, 2, 3, 4,"  # greedy: " 5, 6, 7, ..."


def _stream_text(client: httpx.Client, body: dict) -> tuple[str, dict]:
    """The text of a streamed /generate, and its last meta_info; both ways checked against SGLang's contract."""
    body = {**body, "stream": True}
    api_types.GenerateRequest.from_json_value(body)
    with client.stream("POST", "/generate", json=body) as response:
        events = _events(_sse(response))
    for event in events:
        api_types.GenerateResponse.from_json_value(event)
    return "".join(e["text"] for e in events), events[-1]["meta_info"]


def test_stop_strings_are_cut_or_kept_and_a_repeated_prompt_is_cached(client):
    sampling = {"max_new_tokens": 8, "temperature": 0, "stop": ["6", "nine"]}
    text, meta = _stream_text(client, {"text": COUNTING, "sampling_params": sampling})
    assert (text, meta["finish_reason"]) == (" 5, ", {"type": "stop", "matched": "6"})
    assert (meta["completion_tokens"], meta["cached_tokens"]) == (5, 0)
    text, meta = _stream_text(client, {"text": COUNTING, "sampling_params": {**sampling, "no_stop_trim": True}})
    assert (text, meta["cached_tokens"]) == (" 5, 6", len(PROMPT_COUNTING) - 1)
    out = client.post("/generate", json={"text": COUNTING, "sampling_params": {**sampling, "stop": "5,"}}).json()
    assert (out["text"], out["meta_info"]["finish_reason"]["matched"]) == (" ", "5,")
    assert api_types.GenerateResponse.from_json_value(out).meta_info.finish_reason.matched == "5,"


def test_abort_request_ends_the_stream(client, base_url):
    body = {
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": 1000, "ignore_eos": True},
        "stream": True,
        "rid": "to-abort",
    }
    with client.stream("POST", "/generate", json=body) as response:
        lines = _sse(response)
        _first_event(lines)
        assert httpx.post(f"{base_url}/abort_request", json={"rid": "to-abort"}).status_code == 200
        events = _events(lines)
    assert events[-1]["meta_info"]["finish_reason"]["type"] == "abort"
    assert _running(client) == 0


@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/abort_request"])
def test_a_body_declared_past_the_limit_is_refused_before_it_is_read(base_url, path):
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: w\r\nContent-Type: application/json\r\n"
        sock.sendall(f"{head}Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n[".encode())
        answer = sock.makefile("rb")
        status, headers = answer.readline(), list(iter(answer.readline, b"\r\n"))
        length = next(int(line.split(b":")[1]) for line in headers if line.lower().startswith(b"content-length"))
        body = answer.read(length).decode()
    assert status.startswith(b"HTTP/1.1 413 ") and f"larger than {MAX_BODY_BYTES} bytes" in body


def test_a_head_past_its_size_bound_is_refused(base_url):
    """The worker serves through the gateway's protocol (backends/client_timeouts.py): a head sent without end is
    refused at its size bound (uvicorn's own let it grow for ever), so are a slow head and a trickled body; the 431
    reaches a client still sending (a lingering close: a plain one sent a reset that could destroy it)."""
    assert head_refusal(int(base_url.rsplit(":", 1)[1]), MAX_HEAD_BYTES) == b"HTTP/1.1 431"


def test_a_text_prompt_past_the_context_in_characters_is_refused_unencoded(client):
    """Encoding 8 MB of text took seconds of CPU and ~1 GB: a text longer in characters than the context's tokens
    can stand for is refused before it is encoded (tests/worker/test_prompt_text.py: the bound, the GIL)."""
    body = {"text": "hello world, this is text. " * 80000, "sampling_params": {"max_new_tokens": 1}}
    answer = client.post("/generate", json=body)
    assert answer.status_code == 400
    message = answer.json()["error"]["message"]
    assert f"context length is {CONTEXT}" in message and "2160000 characters" in message


def _wait_until_idle(client: httpx.Client) -> int:
    """Running requests once the worker has settled (polls; the disconnect is noticed asynchronously)."""
    for _ in range(200):
        if _running(client) == 0:
            break
        time.sleep(0.05)
    return _running(client)


def test_client_disconnect_cancels_stream(client, base_url):
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1000, "ignore_eos": True}, "stream": True}
    with httpx.Client(base_url=base_url, timeout=60) as other, other.stream("POST", "/generate", json=body) as r:
        first = _first_event(_sse(r))
        info = client.get("/get_server_info").json()["internal_states"][0]
        assert info["running_requests"] == 1, (first, info)  # failed once in CI (0): this says what the worker saw
    assert _wait_until_idle(client) == 0


def test_client_disconnect_cancels_non_stream(client, base_url):
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1000, "ignore_eos": True}}
    with pytest.raises(httpx.ReadTimeout), httpx.Client(base_url=base_url, timeout=1.0) as other:
        other.post("/generate", json=body)
    assert _wait_until_idle(client) == 0


def _metrics(client: httpx.Client) -> dict[str, float]:
    """The worker's /metrics samples by name (each has one series: its model)."""
    r = client.get("/metrics")
    assert r.status_code == 200
    return {s.name: s.value for f in text_string_to_metric_families(r.text) for s in f.samples}


def test_metrics_show_running_waiting_and_kv_cache_under_vllm_names(client, base_url):
    _wait_until_idle(client)
    before = _metrics(client)
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1000, "ignore_eos": True}, "stream": True}
    with ExitStack() as streams:

        def open_stream() -> httpx.Response:
            r = streams.enter_context(
                httpx.Client(base_url=base_url, timeout=60).stream("POST", "/generate", json=body)
            )
            assert r.status_code == 200
            return r

        readers = [_sse(open_stream()), _sse(open_stream())]  # both slots busy (1000 tokens each); kept open
        for lines in readers:
            _first_event(lines)
        prefilled = _metrics(client)
        open_stream()  # waits for a slot: the queue (max_waiting 1) is full now
        refused = client.post("/generate", json=body)
        queued = _metrics(client)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert "overloaded" in refused.json()["error"]["message"]
    assert queued["vllm:num_requests_running"] == 2 and queued["vllm:num_requests_waiting"] == 1, queued
    assert 0 < prefilled["vllm:kv_cache_usage_perc"] <= 1
    assert _wait_until_idle(client) == 0
    after = _metrics(client)
    assert after["vllm:num_requests_running"] == 0 and after["vllm:num_requests_waiting"] == 0
    assert after["vllm:kv_cache_usage_perc"] == 0
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == 3 * len(PROMPT)
    assert after["vllm:generation_tokens_total"] > before["vllm:generation_tokens_total"]
    assert after["vllm:time_to_first_token_seconds_count"] - before["vllm:time_to_first_token_seconds_count"] >= 1
    assert "worker:grammar_cache_hits_total" in after and "worker:grammar_compile_seconds_total" in after
    queries = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    # Two or three placements of one prompt (the queued request may be aborted before a slot frees): the second
    # finds all but its last token in the first one's slot.
    assert queries in (2 * len(PROMPT), 3 * len(PROMPT)) and hits >= len(PROMPT) - 1


def test_every_worker_metric_the_dashboard_queries_is_exposed(client):
    queried = queried_metrics(("vllm:", "worker:"))
    assert len(queried) >= 6
    assert queried <= exposed_families(client.get("/metrics").text)


def test_server_info_reports_the_worker_process_cpu_time(client):
    """bench/worker_ab.py reads it for CPU ms per token, which a shared host's load skews less than wall time."""
    cpu = lambda: client.get("/get_server_info").json()["internal_states"][0]["process_cpu_seconds"]
    before = cpu()
    assert client.post(
        "/generate", json={"input_ids": [9906, 1917], "sampling_params": {"max_new_tokens": 2}}
    ).is_success
    assert cpu() > before > 0


def test_server_info_and_metrics_say_how_decode_steps_run(client):
    """--cuda-graphs auto: graphs on with CUDA (the worker's default device where there is one), else off; the
    steps count as replays or eager steps, in /get_server_info and /metrics alike."""
    info = lambda: client.get("/get_server_info").json()["internal_states"][0]
    _wait_until_idle(client)
    before, metrics_before = info(), _metrics(client)
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True}}
    assert client.post("/generate", json=body).is_success
    after, metrics_after = info(), _metrics(client)
    on = after["cuda_graphs"].startswith("on")
    assert on == torch.cuda.is_available(), after["cuda_graphs"]
    counted = "decode_graph_replays" if on else "decode_eager_steps"
    assert after[counted] - before[counted] == 3  # the first token comes from the prefill
    assert metrics_after[f"worker:{counted}_total"] - metrics_before[f"worker:{counted}_total"] == 3
    assert metrics_after["worker:cuda_graphs_enabled"] == int(on)
