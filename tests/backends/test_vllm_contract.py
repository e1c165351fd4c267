"""What VLLMBackend sends, and what the worker's vLLM dialect answers, read by vLLM 0.33's own models."""

from __future__ import annotations

import json

import httpx
import orjson
import pytest

from backends.base import BackendError, GenerateRequest, Grammar, SamplingParams
from backends.vllm import _StreamReader, completions_payload, generate_payload
from tests.backends.conftest import CONTEXT
from tests.backends.vllm_contract import ContractError

PROMPT = [504, 3575, 282, 4649, 314]  # "The capital of France is"
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
TAG = {
    "type": "structural_tag",
    "format": {
        "type": "sequence",
        "elements": [{"type": "token", "token": 2}, {"type": "json_schema", "json_schema": SCHEMA}],
    },
}


def request(grammar: Grammar | None = None, logprobs: int | None = None, **sampling) -> GenerateRequest:
    return GenerateRequest(
        rid="rid-1",
        input_ids=PROMPT,
        sampling=SamplingParams(max_new_tokens=sampling.pop("max_new_tokens", 8), **sampling),
        grammar=grammar,
        logprobs=logprobs is not None,
        top_logprobs=logprobs or 0,
    )


def read(oracle, api: str, req: GenerateRequest) -> dict:
    """vLLM's reading of the body VLLMBackend sends for `req`."""
    if api == "completions":
        seen = oracle.check("completion_request", completions_payload(req, "served"))
        assert (seen["prompt"], seen["return_token_ids"]) == (PROMPT, True)
    else:
        seen = oracle.check("generate_request", generate_payload(req, "served"))
        assert seen["token_ids"] == PROMPT
    assert (seen["model"], seen["request_id"], seen["stream"], seen["include_usage"]) == ("served", "rid-1", True, True)
    return seen["sampling"]


@pytest.mark.parametrize("api", ["completions", "generate"])
def test_plain_request(oracle, api):
    sampling = read(
        oracle,
        api,
        request(
            temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, seed=7, frequency_penalty=0.5, skip_special_tokens=False
        ),
    )
    assert sampling == {
        "max_tokens": 8,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.05,
        "seed": 7,
        "stop_token_ids": [],
        "ignore_eos": False,
        "skip_special_tokens": False,
        "logprobs": None,
        "frequency_penalty": 0.5,
        "presence_penalty": 0.0,
        "include_stop_str_in_output": False,
        "stop": [],
        "min_tokens": 0,
        "structured_outputs": None,
    }


@pytest.mark.parametrize("api", ["completions", "generate"])
def test_stop_ids_ignore_eos_and_disabled_top_k(oracle, api):
    sampling = read(oracle, api, request(stop_token_ids=[2, 30], ignore_eos=True, top_k=-1))
    assert (sampling["stop_token_ids"], sampling["ignore_eos"], sampling["top_k"]) == ([2, 30], True, 0)


@pytest.mark.parametrize("api", ["completions", "generate"])
def test_min_tokens_reaches_vllm_within_the_budget(oracle, api):
    assert read(oracle, api, request(min_new_tokens=5))["min_tokens"] == 5
    assert read(oracle, api, request(min_new_tokens=50, max_new_tokens=8))["min_tokens"] == 8


@pytest.mark.parametrize("api", ["completions", "generate"])
def test_logprobs(oracle, api):
    assert read(oracle, api, request(logprobs=3))["logprobs"] == 3
    assert read(oracle, api, request(logprobs=0))["logprobs"] == 0
    if api == "completions":
        body = completions_payload(request(logprobs=3), "served")
        assert oracle.check("completion_request", body)["return_tokens_as_token_ids"] is True


@pytest.mark.parametrize("api", ["completions", "generate"])
@pytest.mark.parametrize(
    "grammar, expected",
    [
        (Grammar("json_schema", json.dumps(SCHEMA)), {"json": SCHEMA}),
        (Grammar("regex", "(yes|no)"), {"regex": "(yes|no)"}),
        (Grammar("ebnf", 'root ::= "yes" | "no"'), {"grammar": 'root ::= "yes" | "no"'}),
        (Grammar("structural_tag", json.dumps(TAG)), {"structural_tag": json.dumps(TAG)}),
    ],
    ids=["json_schema", "regex", "ebnf", "structural_tag"],
)
def test_each_grammar_kind_reaches_structured_outputs(oracle, api, grammar, expected):
    assert read(oracle, api, request(grammar))["structured_outputs"] == expected


def test_the_oracle_refuses_what_vllm_refuses_or_ignores(oracle):
    with pytest.raises(ContractError, match="guided_json"):  # silently ignored by vLLM: unconstrained output
        oracle.check("completion_request", {"prompt": PROMPT, "guided_json": SCHEMA})
    with pytest.raises(ContractError, match="max_new_tokens"):
        oracle.check("generate_request", {"token_ids": PROMPT, "sampling_params": {"max_new_tokens": 3}})
    token_text = {"type": "structural_tag", "format": {"type": "token", "token": "<|im_end|>"}}
    with pytest.raises(ContractError, match="structural_tag"):  # vLLM checks tags without a tokenizer
        read(oracle, "completions", request(Grammar("structural_tag", json.dumps(token_text))))


def _sse(response: httpx.Response) -> list[dict]:
    lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


def test_worker_completion_stream_is_vllms(oracle, worker_url):
    body = completions_payload(request(logprobs=2, max_new_tokens=4, temperature=0.0), "")
    del body["model"]
    with httpx.stream("POST", f"{worker_url}/v1/completions", json=body, timeout=60) as response:
        chunks = _sse(response)
    read_back = [oracle.check("completion_chunk", chunk) for chunk in chunks]
    assert read_back[0]["choices"][0]["prompt_token_ids"] == PROMPT
    assert [len(c["choices"][0]["token_ids"]) for c in read_back[:-1]] == [1, 1, 1, 1]
    assert read_back[-2]["choices"][0]["finish_reason"] == "length"
    assert read_back[-1]["choices"] == [] and read_back[-1]["usage"]["completion_tokens"] == 4
    first = read_back[0]["choices"][0]["logprobs"]
    assert first["tokens"] == [f"token_id:{read_back[0]['choices'][0]['token_ids'][0]}"]
    assert len(first["top_logprobs"][0]) in (2, 3)  # the sampled token plus the top 2


def test_worker_generate_stream_is_vllms(oracle, worker_url):
    body = generate_payload(request(logprobs=1, max_new_tokens=3, temperature=0.0), "")
    del body["model"]
    body["return_token_ids"] = True
    body["sampling_params"].update(max_tokens=3.0, logprobs=1.0)  # integral floats are integers, as in vLLM
    with httpx.stream("POST", f"{worker_url}/inference/v1/generate", json=body, timeout=60) as response:
        chunks = _sse(response)
    read_back = [oracle.check("generate_chunk", chunk) for chunk in chunks]
    assert read_back[0]["prompt_token_ids"] == PROMPT
    assert read_back[-2]["choices"][0]["finish_reason"] == "length"
    usage = read_back[-1]["usage"]
    cached = usage.pop("prompt_tokens_details")["cached_tokens"]
    assert usage == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert cached in (0, 4)  # 4 once an earlier request left this prompt in a slot
    entry = read_back[0]["choices"][0]["logprobs"]["content"][0]
    assert entry["token_id"] == read_back[0]["choices"][0]["token_ids"][0]


COUNTING = [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28]  # "1, 2, 3, 4,": greedy " 5, 6, 7, ..."


def test_worker_stop_strings_min_tokens_and_cached_tokens_are_vllms(oracle, worker_url):
    body = {
        "prompt": COUNTING,
        "max_tokens": 8,
        "temperature": 0,
        "stop": [",", "6"],
        "min_tokens": 4,
        "include_stop_str_in_output": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sampling = oracle.check("completion_request", body)["sampling"]
    assert (sampling["stop"], sampling["min_tokens"], sampling["include_stop_str_in_output"]) == ([",", "6"], 4, True)
    runs = []
    for _ in range(2):
        with httpx.stream("POST", f"{worker_url}/v1/completions", json=body, timeout=60) as response:
            runs.append([oracle.check("completion_chunk", chunk) for chunk in _sse(response)])
    for chunks in runs:  # the first "," ends within the first 4 tokens: vLLM's min_tokens lets "6" end it
        assert "".join(c["choices"][0]["text"] for c in chunks[:-1]) == " 5, 6"
        assert (chunks[-2]["choices"][0]["finish_reason"], chunks[-2]["choices"][0]["stop_reason"]) == ("stop", "6")
    assert runs[1][-1]["usage"]["prompt_tokens_details"] == {"cached_tokens": len(COUNTING) - 1}
    generate = {"token_ids": COUNTING, "sampling_params": {"stop": "6", "min_tokens": 2, "max_tokens": 4}}
    assert oracle.check("generate_request", generate)["sampling"]["stop"] == ["6"]


def test_worker_text_offsets_count_the_text_sent_as_vllms_do(oracle, worker_url):
    """vLLM starts each chunk's offsets at the length of the text sent before it: a token a stop string holds back
    moves no offset until its text is sent (the greedy " 5, 6," here holds " 6" back for the stop "6!")."""
    body = {"prompt": COUNTING, "max_tokens": 6, "temperature": 0, "stop": ["6!"], "logprobs": 0, "stream": True}
    with httpx.stream("POST", f"{worker_url}/v1/completions", json=body, timeout=60) as response:
        choices = [oracle.check("completion_chunk", chunk)["choices"][0] for chunk in _sse(response)]
    texts = [c["text"] for c in choices]
    assert "".join(texts).startswith(" 5, 6,") and "" in texts[:-1]  # a chunk whose token was held back
    for i, choice in enumerate(choices):
        offsets, tokens = choice["logprobs"]["text_offset"], choice["logprobs"]["tokens"]
        assert offsets == [len("".join(texts[:i])) + len("".join(tokens[:j])) for j in range(len(tokens))]


def test_worker_models_and_errors_are_vllms(oracle, worker_url):
    models = oracle.check("model_list", httpx.get(f"{worker_url}/v1/models").json())
    assert models["data"][0]["id"].endswith(".gguf")
    for body, status in [
        ({"prompt": "The capital of France is", "stream": True}, 400),
        ({"prompt": PROMPT, "stream": True, "model": "no-such-model"}, 404),
        ({"prompt": PROMPT, "stream": True, "structured_outputs": {"regex": "(("}}, 400),
        ({"prompt": PROMPT, "stream": True, "max_tokens": 1.5}, 400),
        ({"prompt": PROMPT, "stream": True, "logprobs": True}, 400),
        ({"prompt": PROMPT, "stream": True, "logprobs": 10**5}, 400),  # past vLLM's max_logprobs (20)
        ({"prompt": PROMPT, "stream": True, "top_k": False}, 400),
        ({"prompt": PROMPT, "stream": True, "echo": 0}, 400),
        ({"prompt": PROMPT, "stream": True, "stream_options": []}, 400),
    ]:
        response = httpx.post(f"{worker_url}/v1/completions", json=body)
        assert response.status_code == status
        assert oracle.check("error", response.json())["error"]["code"] == status
    assert "send token ids" in httpx.post(f"{worker_url}/v1/completions", json={"prompt": "hi"}).text


@pytest.mark.parametrize(
    "path, body, message",
    [
        ("/v1/completions", {"prompt": PROMPT, "max_tokens": 1.5}, "max_tokens must be an integer, got 1.5"),
        ("/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "min_tokens": 3}, "min_tokens must be in [0, max_"),
        ("/v1/completions", {"prompt": [10**6]}, "prompt must be token ids in [0, "),
        ("/v1/completions", {"prompt": PROMPT, "temperature": "1"}, "\ntemperature must be a finite number"),
        ("/inference/v1/generate", {"token_ids": PROMPT, "sampling_params": {"seed": 0.5}}, "sampling_params.seed "),
        ("/inference/v1/generate", {"token_ids": [-1], "sampling_params": {}}, "token_ids must be token ids in [0, "),
        (  # vLLM refuses a prompt longer than the context leaves after max_tokens (16 by default)
            "/v1/completions",
            {"prompt": [PROMPT[0]] * (CONTEXT - 10)},
            (
                f"You passed {CONTEXT - 10} input tokens and requested 16 output tokens. However, the model's context "
                f"length is only {CONTEXT} tokens, resulting in a maximum input length of {CONTEXT - 16} tokens."
            ),
        ),
        (
            "/inference/v1/generate",
            {"token_ids": PROMPT, "sampling_params": {"max_tokens": CONTEXT}},
            f"You passed 5 input tokens and requested {CONTEXT} output tokens.",
        ),
    ],
)
def test_worker_refusals_name_the_vllm_fields_sent(worker_url, path, body, message):
    response = httpx.post(f"{worker_url}{path}", json={**body, "stream": True})
    assert response.status_code == 400
    assert message in "\n" + response.json()["error"]["message"]


@pytest.mark.parametrize(
    "path, body, message",
    [
        ("/v1/completions", {"prompt": PROMPT, "model": 5}, "model must be a string, got 5"),
        ("/v1/completions", {"prompt": PROMPT, "max_tokens": 0}, "max_tokens must be at least 1, got 0."),
        ("/inference/v1/generate", {"token_ids": PROMPT, "sampling_params": {"max_tokens": 0}}, "at least 1, got 0"),
    ],
)
def test_worker_refuses_with_400_what_vllm_refuses(oracle, worker_url, path, body, message):
    kind = "completion_request" if path == "/v1/completions" else "generate_request"
    with pytest.raises(ContractError):
        oracle.check(kind, {**body, "stream": True})
    response = httpx.post(f"{worker_url}{path}", json={**body, "stream": True})
    assert response.status_code == 400
    assert message in oracle.check("error", response.json())["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/completions", "/inference/v1/generate"])
def test_worker_continuous_usage_stats_put_the_usage_so_far_on_every_chunk(oracle, worker_url, path):
    """vLLM's `continuous_usage_stats`: with `include_usage`, each chunk carries the counts so far; without it,
    none does (should_include_usage)."""
    sampling = {"max_tokens": 3, "temperature": 0}
    body = (
        {"prompt": PROMPT, **sampling}
        if path == "/v1/completions"
        else {"token_ids": PROMPT, "sampling_params": sampling}
    )
    kind = "completion_chunk" if path == "/v1/completions" else "generate_chunk"
    usages = {}
    for include in (True, False):
        options = {"include_usage": include, "continuous_usage_stats": True}
        with httpx.stream("POST", f"{worker_url}{path}", json={**body, "stream": True, "stream_options": options}) as r:
            usages[include] = [oracle.check(kind, chunk).get("usage") for chunk in _sse(r)]
    assert [u["completion_tokens"] for u in usages[True]] == [1, 2, 3, 3]
    assert all(u["prompt_tokens"] == 5 and u["total_tokens"] == 5 + u["completion_tokens"] for u in usages[True])
    assert usages[False] == [None] * 3


def test_worker_refuses_stream_options_it_cannot_read(worker_url):
    for options in ({"continuous_usage_stats": "yes"}, {"include_usage": True, "per_chunk": True}):
        response = httpx.post(
            f"{worker_url}/v1/completions", json={"prompt": PROMPT, "stream": True, "stream_options": options}
        )
        assert response.status_code == 400 and "stream_options" in response.json()["error"]["message"]


def _lines(*events: dict) -> list[bytes]:
    return [b"data: " + orjson.dumps(e) for e in events] + [b"data: [DONE]"]


def _chunk(ids: list[int], finish: str | None = None, stop_reason: int | None = None) -> dict:
    choice = {"index": 0, "text": "", "token_ids": ids, "finish_reason": finish, "stop_reason": stop_reason}
    return {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m", "choices": [choice]}


def _usage(cached: int) -> dict:
    usage = {
        "prompt_tokens": 5,
        "completion_tokens": 2,
        "total_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    return {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m", "choices": [], "usage": usage}


def _read(lines: list[bytes]) -> list:
    reader = _StreamReader("completions", request())
    return [chunk for line in lines for chunk in reader.line(line)]


def test_reader_holds_the_finish_for_usage_and_names_stop_tokens(oracle):
    """Shapes the worker does not produce (a named stop id, cached tokens), checked against vLLM's models first."""
    events = [_chunk([7]), _chunk([30], "stop", 30), _usage(cached=4)]
    for event in events:
        oracle.check("completion_chunk", event)
    chunks = _read(_lines(*events))
    assert [(c.output_ids, c.finish_reason, c.matched_stop) for c in chunks] == [([7], None, None), ([30], "stop", 30)]
    assert (chunks[-1].prompt_tokens, chunks[-1].completion_tokens, chunks[-1].cached_tokens) == (5, 2, 4)
    eos = _read(_lines(_chunk([7]), _chunk([2], "stop")))  # EOS: vLLM gives no stop_reason
    assert eos[-1].matched_stop == 2


def test_reader_maps_error_events_and_aborts(oracle):
    error = {"error": {"message": "Internal server error", "type": "InternalServerError", "param": None, "code": 500}}
    oracle.check("error", error)
    with pytest.raises(BackendError) as e:
        _read(_lines(_chunk([7]), error))
    assert (e.value.status, e.value.retryable) == (500, True)  # an engine's or generation's error: failed over
    message = "This model's maximum context length is 2048 tokens."
    own = {"error": {"message": message, "type": "BadRequestError", "param": "max_tokens", "code": 400}}
    oracle.check("error", own)  # a VLLMValidationError's, the request's own: the client's 400 with the message
    with pytest.raises(BackendError) as e:
        _read(_lines(own))
    assert (e.value.status, e.value.retryable) == (400, False) and message in str(e.value)
    with pytest.raises(BackendError, match="aborted") as e:
        _read(_lines(_chunk([7], "abort")))
    assert e.value.retryable
    with pytest.raises(BackendError, match="without a finish reason"):
        _read(_lines(_chunk([7])))
