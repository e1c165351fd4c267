"""The gateway over real HTTP, in front of the SGLang stand-in (both streaming modes)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import socket
from collections.abc import Iterator

import httpx
import orjson
import pytest

from backends.checkpoint import EMBEDDED_MODEL_ID
from backends.sglang import SGLangBackend
from gateway.api.tokenize import requested_model
from gateway.app import create_app
from gateway.errors import APIError
from gateway.models.registry import ModelRegistry
from gateway.validation.fields import Fields
from gateway.validation.tokenize import DETOKENIZE, TOKENIZE_PROMPT
from tests.gateway.http_server import dead_url, serve
from tests.gateway.sglang_standin import Script, fake_logprob

MODEL = EMBEDDED_MODEL_ID
IM_END = 2
WAIT_S = 30  # upper bound for an event that must happen; never a speed check
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture
def gateway(standin, tokenize_only) -> Iterator[tuple[httpx.Client, object]]:
    server, url = standin
    model = dataclasses.replace(tokenize_only, backend=SGLangBackend(url, incremental=server.incremental))
    with serve(create_app(ModelRegistry([model]))) as base, httpx.Client(base_url=base, timeout=WAIT_S) as client:
        server.encode = model.encoder.encode_plain
        yield client, server


def say(server, text: str, **script) -> None:
    """Script the stand-in to answer `text` then the end-of-turn token."""
    ids = server.encode(text) + [IM_END]
    server.script = lambda body: Script(ids=ids, **script)


def sse(response: httpx.Response) -> list[dict]:
    """The JSON events of an SSE body, checking its framing and the final [DONE]."""
    assert response.headers["content-type"].startswith("text/event-stream")
    blocks = response.text.split("\n\n")
    assert blocks[-2:] == ["data: [DONE]", ""], blocks[-3:]
    assert all(b.startswith("data: ") for b in blocks[:-1])
    return [json.loads(b.removeprefix("data: ")) for b in blocks[:-2]]


def chat(client: httpx.Client, **fields) -> httpx.Response:
    return client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, **fields})


def test_chat_answer_with_usage_and_request_id(gateway):
    client, server = gateway
    say(server, "It is sunny.")
    r = chat(client, temperature=0, headers=None)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "It is sunny.", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
            "stop_reason": None,  # vLLM's: the model's EOS token ended it
        }
    ]
    sent = server.bodies[-1]
    assert sent["sampling_params"]["stop_token_ids"] == [IM_END] and "structural_tag" not in sent["sampling_params"]
    tokens = client.post("/tokenize", json={"model": MODEL, "messages": USER}).json()
    assert tokens["tokens"] == sent["input_ids"]  # /tokenize gives exactly what the backend receives
    usage = body["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (
        tokens["count"],
        len(server.encode("It is sunny.")) + 1,
    )
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert len(r.headers["x-request-id"]) > 8
    mine = client.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": USER}, headers={"x-request-id": "abc-123"}
    )
    assert mine.headers["x-request-id"] == "abc-123"


def test_chat_stream_chunks_and_usage(gateway):
    client, server = gateway
    say(server, "Sunny and 20 °C 😀.")
    events = sse(chat(client, stream=True, stream_options={"include_usage": True}))
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(e["object"] == "chat.completion.chunk" and e["usage"] is None for e in events[:-1])
    content = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert content == "Sunny and 20 °C 😀."
    assert events[-2]["choices"][0]["finish_reason"] == "stop"
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == len(server.encode(content)) + 1


def test_continuous_usage_stats_put_the_usage_so_far_on_every_chunk(gateway):
    """vLLM's stream_options.continuous_usage_stats: each chunk's usage counts the tokens sent up to it."""
    client, server = gateway
    say(server, "Sunny and 20 °C 😀.")
    options = {"include_usage": True, "continuous_usage_stats": True}
    events = sse(chat(client, stream=True, stream_options=options))
    usages = [e["usage"] for e in events]
    prompt = usages[0]["prompt_tokens"]
    assert usages[0]["completion_tokens"] == 0 and all(u["prompt_tokens"] == prompt for u in usages)
    completion = [u["completion_tokens"] for u in usages]
    assert (
        completion == sorted(completion)
        and completion[-1] == completion[-2] == len(server.encode("Sunny and 20 °C 😀.")) + 1
    )
    assert all(u["total_tokens"] == prompt + u["completion_tokens"] for u in usages) and events[-1]["choices"] == []


def test_continuous_usage_stats_count_each_choice_apart_as_vllm_does(gateway):
    """With n > 1 (and several completion prompts) a chunk's usage is its own choice's: its prompt and its tokens so
    far (vLLM's per-choice continuous usage); the closing usage sums them."""
    client, server = gateway
    say(server, "Sunny.")
    options = {"include_usage": True, "continuous_usage_stats": True}
    events = sse(chat(client, stream=True, n=2, stream_options=options))
    answer = len(server.encode("Sunny.")) + 1
    prompt = events[-1]["usage"]["prompt_tokens"]
    finishes = [e["usage"] for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
    assert [u["completion_tokens"] for u in finishes] == [answer, answer]
    assert all(u["prompt_tokens"] == prompt for u in finishes)
    assert events[-1]["usage"]["completion_tokens"] == 2 * answer
    body = {"model": MODEL, "prompt": [[5, 6], [7]], "n": 2, "max_tokens": 4, "stream": True, "stream_options": options}
    events = sse(client.post("/v1/completions", json=body))
    final = {e["choices"][0]["index"]: e["usage"] for e in events if e["choices"] and e["choices"][0]["finish_reason"]}
    assert {i: u["prompt_tokens"] for i, u in final.items()} == {0: 2, 1: 2, 2: 1, 3: 1}
    assert events[-1]["usage"]["prompt_tokens"] == 3
    assert events[-1]["usage"]["completion_tokens"] == sum(u["completion_tokens"] for u in final.values())


def test_tool_call_stream_and_fold(gateway):
    client, server = gateway
    say(server, CALL)
    r = chat(client, tools=[WEATHER])
    message = r.json()["choices"][0]["message"]
    assert r.json()["choices"][0]["finish_reason"] == "tool_calls"
    assert message["content"] is None
    (call,) = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    sent = server.bodies[-1]["sampling_params"]
    assert sent["skip_special_tokens"] is False and "structural_tag" in sent

    events = sse(chat(client, tools=[WEATHER], stream=True))
    deltas = [d for e in events for d in e["choices"][0]["delta"].get("tool_calls", [])]
    assert (
        deltas[0]["id"].startswith("call_")
        and deltas[0]["function"]["name"] == "get_weather"
        and deltas[0]["index"] == 0
    )
    assert all("id" not in d and "name" not in d["function"] for d in deltas[1:])
    assert json.loads("".join(d["function"]["arguments"] for d in deltas)) == {"city": "Paris"}
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_n_choices_are_separate_requests(gateway):
    client, server = gateway
    say(server, "Yes.")
    body = chat(client, n=3, seed=7).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert all(c["message"]["content"] == "Yes." for c in body["choices"])
    sent = server.bodies[-3:]
    assert len({b["rid"] for b in sent}) == 3 and sorted(b["sampling_params"]["sampling_seed"] for b in sent) == [
        7,
        8,
        9,
    ]
    assert body["usage"]["completion_tokens"] == 3 * (len(server.encode("Yes.")) + 1)
    assert body["usage"]["prompt_tokens"] == len(sent[0]["input_ids"])


def test_stop_string_cuts_and_aborts(gateway):
    client, server = gateway
    say(server, "Hello STOP world and more text that never comes", hold_after=6)
    r = chat(client, stop=["STOP"], stream=True)
    events = sse(r)
    assert (
        "".join(e["choices"][0]["delta"].get("content", "") for e in events) == "Hello "
    )  # text before the stop string, its last space included
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    assert events[-1]["choices"][0]["stop_reason"] == "STOP"  # vLLM's, on the finishing chunk only
    assert all("stop_reason" not in e["choices"][0] for e in events[:-1])
    assert server.closed[server.bodies[-1]["rid"]].wait(WAIT_S)
    body = chat(client, stop=["STOP"]).json()
    assert (body["choices"][0]["finish_reason"], body["choices"][0]["stop_reason"]) == ("stop", "STOP")
    body = {"model": MODEL, "prompt": "x", "stop": ["never", "STOP"]}
    choice = client.post("/v1/completions", json=body).json()["choices"][0]
    assert (choice["text"], choice["finish_reason"], choice["stop_reason"]) == ("Hello ", "stop", "STOP")
    events = sse(client.post("/v1/completions", json={**body, "stream": True}))
    assert (events[-1]["choices"][0]["finish_reason"], events[-1]["choices"][0]["stop_reason"]) == ("stop", "STOP")
    # vLLM's completions stream writes stop_reason on every chunk, null until the finishing one (its chat stream not)
    assert len(events) > 1 and all(e["choices"][0]["stop_reason"] is None for e in events[:-1])


def test_length_finish(gateway):
    client, server = gateway
    say(server, "one two three four five")
    body = chat(client, max_completion_tokens=3).json()
    assert body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 3
    assert body["choices"][0]["stop_reason"] is None
    assert server.bodies[-1]["sampling_params"]["max_new_tokens"] == 3


def test_logprobs_pass_through(gateway):
    client, server = gateway
    say(server, "Hi 世界")
    body = chat(client, logprobs=True, top_logprobs=2).json()
    content = body["choices"][0]["logprobs"]["content"]
    ids = server.encode("Hi 世界") + [IM_END]
    assert [c["logprob"] for c in content] == [fake_logprob(t) for t in ids]
    assert bytes(b for c in content[:-1] for b in c["bytes"]).decode() == "Hi 世界"
    assert content[-1]["token"] == "<|im_end|>" and len(content[0]["top_logprobs"]) == 2
    assert server.bodies[-1]["return_logprob"] is True and server.bodies[-1]["top_logprobs_num"] == 2


def test_backend_failure_mid_stream(gateway):
    client, server = gateway
    say(server, "partial answer here", error_after=2)
    events = sse(chat(client, stream=True))
    assert events[-1]["error"]["type"] == "server_error" and "scripted failure" in events[-1]["error"]["message"]
    r = chat(client)
    assert r.status_code == 502 and r.json()["error"]["code"] == "backend_error"


def test_backend_refusal_keeps_4xx(gateway):
    client, server = gateway
    server.script = lambda body: Script(refuse=400)
    r = chat(client, stream=True)
    assert r.status_code == 400 and "refused" in r.json()["error"]["message"]


def test_stream_disconnect_aborts_backend_request(gateway):
    client, server = gateway
    say(server, "a long answer that the client will not wait for", hold_after=2)
    with client.stream("POST", "/v1/chat/completions", json={"model": MODEL, "messages": USER, "stream": True}) as r:
        lines = r.iter_lines()
        assert "role" in next(lines)
    rid = server.bodies[-1]["rid"]
    assert server.closed[rid].wait(WAIT_S) and server.aborted[rid].wait(WAIT_S)


def test_non_stream_disconnect_aborts_backend_request(gateway):
    client, server = gateway
    say(server, "a long answer that the client will not wait for", hold_after=2)
    body = orjson.dumps({"model": MODEL, "messages": USER})
    host, port = client.base_url.host, client.base_url.port
    with socket.create_connection((host, port)) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert server.received.acquire(timeout=WAIT_S)
    rid = server.bodies[-1]["rid"]
    assert server.closed[rid].wait(WAIT_S) and server.aborted[rid].wait(WAIT_S)


def test_completions_text_and_ids(gateway):
    client, server = gateway
    say(server, " Paris.")
    body = client.post(
        "/v1/completions", json={"model": MODEL, "prompt": "The capital of France is", "max_tokens": 8}
    ).json()
    assert body["object"] == "text_completion"
    choice = {"index": 0, "text": " Paris.", "logprobs": None, "finish_reason": "stop", "stop_reason": None}
    assert body["choices"] == [choice]
    body = client.post("/v1/completions", json={"model": MODEL, "prompt": [[5, 6], [7]], "n": 2, "logprobs": 1}).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert sorted(b["input_ids"] for b in server.bodies[-4:]) == [[5, 6], [5, 6], [7], [7]]
    assert body["usage"]["prompt_tokens"] == 3
    for choice in body["choices"]:  # one entry per output token: the text's tokens, then the stop token's
        assert choice["text"] == " Paris."
        assert choice["logprobs"]["tokens"] == [" Paris", ".", "<|im_end|>"]
    events = sse(client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "stream": True}))
    assert "".join(e["choices"][0]["text"] for e in events) == " Paris."


def test_echo_opens_each_choice_with_its_prompt(gateway):
    """OpenAI's and vLLM's echo: the prompt's text (token ids decoded) before the completion, streamed first."""
    client, server = gateway
    say(server, " Paris.")
    body = {"model": MODEL, "prompt": ["The capital is", [504, 3575]], "n": 2, "echo": True}
    texts = [c["text"] for c in client.post("/v1/completions", json=body).json()["choices"]]
    decoded = client.post("/detokenize", json={"model": MODEL, "tokens": [504, 3575]}).json()["prompt"]
    assert texts == ["The capital is Paris."] * 2 + [decoded + " Paris."] * 2
    events = sse(client.post("/v1/completions", json={**body, "stream": True}))
    assert [e["choices"][0]["text"] for e in events[:4]] == ["The capital is"] * 2 + [decoded] * 2


def test_a_completion_that_names_no_max_tokens_gets_openais_16(gateway):
    client, server = gateway
    say(server, " Paris.")
    for extra, expected in (({}, 16), ({"max_tokens": None}, 16), ({"max_tokens": 40}, 40)):
        assert client.post("/v1/completions", json={"model": MODEL, "prompt": "x", **extra}).status_code == 200
        assert server.bodies[-1]["sampling_params"]["max_new_tokens"] == expected
    client.post("/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    assert server.bodies[-1]["sampling_params"]["max_new_tokens"] > 16  # chat keeps the model's default


UNSATISFIABLE = {"type": "object", "properties": {"a": {"type": "string", "minLength": 5, "maxLength": 2}}}
NEGATED = {"type": "object", "properties": {"a": {"type": "string", "not": {"const": "x"}}}}


@pytest.mark.parametrize(
    "path, body, status, param, code",
    [
        ("/v1/chat/completions", {"model": "nope", "messages": USER}, 404, "model", "model_not_found"),
        (
            "/v1/chat/completions",
            {"model": MODEL, "messages": USER, "max_tokens": 9000},
            400,
            "messages",
            "context_length_exceeded",
        ),
        (
            "/v1/chat/completions",
            {"model": MODEL, "messages": [{"role": "user", "content": "x" * 40000}]},
            400,
            "messages",
            "context_length_exceeded",
        ),
        (  # the grammar refuses tools[1]: named in the body's own tools, not in those allowed_tools narrowed
            "/v1/chat/completions",
            {
                "model": MODEL,
                "messages": USER,
                "tools": [
                    {"type": "function", "function": {"name": "ok"}},
                    {"type": "function", "function": {"name": "bad", "parameters": UNSATISFIABLE}},
                ],
                "tool_choice": {
                    "type": "allowed_tools",
                    "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "bad"}}]},
                },
            },
            400,
            "tools[1].function.parameters",
            None,
        ),
        (  # a strict schema using a keyword no grammar enforces: named down to the keyword
            "/v1/chat/completions",
            {
                "model": MODEL,
                "messages": USER,
                "tools": [{"type": "function", "function": {"name": "f", "parameters": NEGATED, "strict": True}}],
            },
            400,
            "tools[0].function.parameters.properties.a.not",
            None,
        ),
        (
            "/v1/chat/completions",
            {
                "model": MODEL,
                "messages": USER,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "s", "schema": NEGATED, "strict": True},
                },
            },
            400,
            "response_format.json_schema.schema.properties.a.not",
            None,
        ),
        ("/v1/completions", {"model": MODEL, "prompt": [5, 49152]}, 400, "prompt[1]", None),
        ("/v1/completions", {"model": MODEL, "prompt": [[5], [6, -1]]}, 400, "prompt[1][1]", None),
        ("/v1/chat/completions", [1], 400, None, None),
        ("/detokenize", {"model": MODEL, "tokens": [-1]}, 400, "tokens[0]", None),
        ("/tokenize", {"model": "nope", "prompt": "x"}, 404, "model", "model_not_found"),
        ("/tokenize", {"model": MODEL, "prompt": "x", "messages": USER}, 400, "prompt", None),
    ],
)
def test_request_errors(gateway, path, body, status, param, code):
    client, _ = gateway
    r = client.post(path, json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert (error["param"], error["type"]) == (param, "invalid_request_error")
    if code:
        assert error["code"] == code
    assert "x-request-id" in r.headers


def test_a_prompt_too_long_for_its_tools_says_the_tools_share(gateway):
    """OpenAI's own context error keeps `param: messages` and names the functions' share of the prompt."""
    client, _ = gateway
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "word " * 400}} for i in range(25)]
    error = client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "tools": tools}).json()["error"]
    assert (error["param"], error["code"]) == ("messages", "context_length_exceeded")
    share = re.search(r"\((\d+) in the messages, (\d+) in the tools\)", error["message"])
    assert share and int(share[2]) > 8192 > int(share[1]) > 0, error["message"]


def test_invalid_json_and_unknown_route(gateway):
    client, _ = gateway
    r = client.post("/v1/chat/completions", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = client.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found" and "x-request-id" in r.headers
    r = client.get("/v1/chat/completions")  # a route matched by path, not by method
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed" and "x-request-id" in r.headers
    assert r.headers["allow"] == "POST"  # RFC 9110: a 405 names the methods the route takes
    r = client.get("/v1/models/" + MODEL)  # a route with a path parameter: Starlette's router
    assert r.status_code == 200 and r.json()["id"] == MODEL


def test_a_compressed_body_is_a_415_not_invalid_json(gateway):
    """A gzip body was read as JSON text: a 400 'not valid UTF-8' that hid the cause. A content coding the gateway does
    not decode is refused before the body is read (RFC 9110's 415), in each door's shape; identity is plain JSON."""
    client, _ = gateway
    body = gzip.compress(json.dumps({"model": MODEL, "prompt": "Hi"}).encode())
    for path, shape in (("/tokenize", "error"), ("/v1/messages", "type")):
        r = client.post(path, content=body, headers={"content-type": "application/json", "content-encoding": "gzip"})
        assert r.status_code == 415, r.text
        assert "gzip" in (r.json()["error"]["message"]) and shape in r.json()
    assert r.json()["error"]["type"] == "invalid_request_error"
    plain = client.post("/tokenize", json={"model": MODEL, "prompt": "Hi"}, headers={"content-encoding": "identity"})
    assert plain.status_code == 200 and plain.json()["count"] > 0


POST_DOORS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/tokenize",
    "/detokenize",
)


def test_a_body_of_another_content_type_is_refused_in_each_doors_shape(gateway):
    """A text/plain or form body was parsed as JSON all the same; it is OpenAI's 400 `unsupported_content_type` (vLLM
    answers 400 too), Anthropic's shape under /v1/messages. JSON with a charset, a +json type, or no Content-Type at
    all (FastAPI's, so SGLang's) is read."""
    client, _ = gateway
    body = json.dumps({"model": MODEL, "prompt": "Hi"}).encode()
    for path in POST_DOORS:
        for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            r = client.post(path, content=body, headers={"content-type": kind})
            assert r.status_code == 400, (path, kind, r.text)
            error = r.json()["error"]
            assert error["type"] == "invalid_request_error" and kind in error["message"], (path, r.text)
            if path.startswith("/v1/messages"):
                assert r.json()["type"] == "error"  # Anthropic's shape
            else:
                assert error["code"] == "unsupported_content_type"
    counted = client.post("/tokenize", json={"model": MODEL, "prompt": "Hi"}).json()["count"]
    for kind in ("application/json; charset=utf-8", "Application/JSON", "application/vnd.api+json", None):
        headers = {} if kind is None else {"content-type": kind}
        r = client.post("/tokenize", content=body, headers=headers)
        assert r.status_code == 200 and r.json()["count"] == counted, (kind, r.text)


def test_a_trailing_slash_is_the_same_route_never_a_redirect(gateway):
    """Starlette answered `POST /v1/chat/completions/` with a 307, which curl without -L and clients that follow it
    with a GET lose the body to; the path is served as without the slash (a path parameter's route too), and an
    unknown one is a 404 in the door's shape."""
    client, _ = gateway
    body = {"model": MODEL, "prompt": "Hi"}
    served = client.post("/tokenize/", json=body, follow_redirects=False)
    assert served.status_code == 200 and served.json() == client.post("/tokenize", json=body).json()
    assert client.get(f"/v1/models/{MODEL}/", follow_redirects=False).json()["id"] == MODEL
    refused = client.post("/v1/messages/", json={}, follow_redirects=False)
    assert refused.status_code == 400 and refused.json()["type"] == "error"
    unknown = client.post("/v1/nothing/", json={}, follow_redirects=False)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"


def test_refusals_made_outside_the_messages_door_are_in_anthropics_shape_under_its_path(gateway):
    client, _ = gateway
    for method, path, status, kind in (
        ("GET", "/v1/messages", 405, "invalid_request_error"),
        ("POST", "/v1/messages/batches", 404, "not_found_error"),
    ):
        refused = client.request(method, path, json={})
        assert refused.status_code == status and refused.json()["type"] == "error", refused.text
        assert refused.json()["error"]["type"] == kind
    assert client.get("/v1/nothing").json()["error"]["code"] == "not_found"  # OpenAI's shape elsewhere


def test_models_tokens_health(gateway):
    client, server = gateway
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == [MODEL]
    assert client.get(f"/v1/models/{MODEL}").json()["max_model_len"] == 8192
    assert client.get("/v1/models/other").status_code == 404
    tok = client.post("/tokenize", json={"model": MODEL, "prompt": "Hi<|im_end|>"}).json()
    assert tok["tokens"][-1] == IM_END and tok["count"] == len(tok["tokens"]) and "token_strs" not in tok
    strs = client.post("/tokenize", json={"model": MODEL, "prompt": "Hi there<|im_end|>", "return_token_strs": True})
    assert strs.json()["token_strs"] == ["Hi", "Ġthere", "<|im_end|>"]  # vLLM's: each id's vocabulary entry
    chat_strs = client.post("/tokenize", json={"model": MODEL, "messages": USER, "return_token_strs": True}).json()
    assert (
        chat_strs["token_strs"][:3] == ["<|im_start|>", "system", "Ċ"]
        and len(chat_strs["token_strs"]) == chat_strs["count"]
    )
    bad = client.post("/tokenize", json={"model": MODEL, "prompt": "x", "return_token_strs": "yes"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "return_token_strs"
    assert client.post("/detokenize", json={"model": MODEL, "tokens": tok["tokens"]}).json() == {
        "prompt": "Hi<|im_end|>"
    }
    as_floats = [float(t) for t in tok["tokens"]]  # JSON Schema's integer: 1.0 is an id
    assert client.post("/detokenize", json={"model": MODEL, "tokens": as_floats}).json() == {"prompt": "Hi<|im_end|>"}
    half = client.post("/detokenize", json={"model": MODEL, "tokens": [*tok["tokens"][:1], 1.5]})
    assert half.status_code == 400 and half.json()["error"]["param"] == "tokens[1]"
    assert client.get("/health").json() == {"status": "ok"}
    assert client.get("/ready").status_code == 200
    server.healthy = False
    assert client.get("/ready").status_code == 503


def test_tokenize_serves_the_one_model_when_the_body_names_none(gateway, tokenize_only):
    """vLLM's /tokenize and /detokenize take `model` as optional (its requests declare `model: str | None = None`) and
    serve their model; ours required it. One model served: that one; several: a 400 naming `model`."""
    client, _ = gateway
    named = client.post("/tokenize", json={"model": MODEL, "prompt": "Hi"}).json()
    assert client.post("/tokenize", json={"prompt": "Hi"}).json() == named
    chat = client.post("/tokenize", json={"model": MODEL, "messages": USER}).json()
    assert client.post("/tokenize", json={"messages": USER}).json() == chat
    assert client.post("/detokenize", json={"tokens": named["tokens"]}).json() == {"prompt": "Hi"}
    wrong = client.post("/tokenize", json={"model": 5, "prompt": "Hi"})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "model"
    two = ModelRegistry([tokenize_only, dataclasses.replace(tokenize_only, id="other")])
    for decl in (TOKENIZE_PROMPT, DETOKENIZE):
        with pytest.raises(APIError) as refused:
            requested_model(two, Fields({"prompt": "Hi", "tokens": [1]}, decl))
        assert (refused.value.status, refused.value.param) == (400, "model") and "2 models" in refused.value.message
    assert requested_model(two, Fields({"model": "other", "prompt": "Hi"}, TOKENIZE_PROMPT)).id == "other"


def test_body_limit_and_unreachable_backend(tokenize_only):
    model = dataclasses.replace(tokenize_only, backend=SGLangBackend(dead_url()))
    with (
        serve(create_app(ModelRegistry([model]), max_body_bytes=2048)) as base,
        httpx.Client(base_url=base, timeout=WAIT_S) as client,
    ):
        r = client.post(
            "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "x" * 4096}]}
        )
        assert r.status_code == 413
        for stream in (False, True):
            r = chat(client, stream=stream)
            assert r.status_code == 503 and r.json()["error"]["type"] == "server_error"
            assert r.headers["x-should-retry"] == "true"
        assert client.get("/ready").status_code == 503
