"""The gateway over real HTTP in front of a Router: retries, 503 with Retry-After, deadlines, drain, grammar target."""

from __future__ import annotations

import dataclasses
import json

import httpx
import pytest

from backends.base import Grammar
from backends.router import Router, RoutingPolicy
from backends.sglang import SGLangBackend
from gateway.app import create_app
from gateway.errors import APIError
from gateway.models.planning import chat_grammar
from gateway.models.registry import ModelRegistry
from gateway.process.draining import DrainState
from gateway.types import ChatRequest
from tests.gateway.http_server import dead_url, serve
from tests.gateway.sglang_standin import Script, SGLangStandIn
from tests.gateway.test_app import USER, chat, sse

WAIT_S = 30


def gateway_for(model, urls: list[str], policy: RoutingPolicy, drain: DrainState | None = None):
    router = Router(lambda url: SGLangBackend(url, incremental=True), urls=urls, policy=policy)
    app = create_app(ModelRegistry([dataclasses.replace(model, backend=router)]), drain=drain)
    return serve(app)


@pytest.fixture
def standin(tokenize_only):
    server = SGLangStandIn(incremental=True)
    ids = tokenize_only.encoder.encode_plain("Sunny and warm.") + [2]
    server.script = lambda body: Script(ids=ids)
    with serve(server.app) as url:
        yield server, url


def test_a_dead_replica_is_passed_over(tokenize_only, standin):
    server, url = standin
    with gateway_for(tokenize_only, [dead_url(), url], RoutingPolicy()) as base:
        for stream in (False, True):
            r = chat(httpx.Client(base_url=base, timeout=WAIT_S), stream=stream)
            assert r.status_code == 200
        assert len(server.bodies) == 2


def test_all_replicas_down_is_503_with_retry_after(tokenize_only):
    with gateway_for(tokenize_only, [dead_url(), dead_url()], RoutingPolicy(health_interval_s=4)) as base:
        client = httpx.Client(base_url=base, timeout=WAIT_S)
        for stream in (False, True):
            r = chat(client, stream=stream)
            assert r.status_code == 503 and r.headers["retry-after"] == "4"
            assert r.json()["error"]["code"] == "backend_unavailable" and r.json()["error"]["type"] == "server_error"
        assert client.get("/ready").status_code == 503


def test_one_models_outage_leaves_the_gateway_ready_for_the_others(tokenize_only, standin):
    """Readiness is the pod's: were it 503, every gateway pod would leave the Service and the healthy model too."""
    _, url = standin
    up = Router(lambda u: SGLangBackend(u, incremental=True), urls=[url], policy=RoutingPolicy())
    down = Router(lambda u: SGLangBackend(u, incremental=True), urls=[dead_url()], policy=RoutingPolicy())
    served = [
        dataclasses.replace(tokenize_only, backend=up),
        dataclasses.replace(tokenize_only, id="down", backend=down),
    ]
    with serve(create_app(ModelRegistry(served))) as base:
        client = httpx.Client(base_url=base, timeout=WAIT_S)
        ready = client.get("/ready")
        assert ready.status_code == 200, ready.text
        assert ready.json()["models"] == {tokenize_only.id: True, "down": False}
        assert chat(client).status_code == 200
        refused = client.post("/v1/chat/completions", json={"model": "down", "messages": USER})
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "backend_unavailable"


def test_deadline_is_504_before_output_and_an_error_event_after(tokenize_only, standin):
    server, url = standin
    ids = tokenize_only.encoder.encode_plain("Sunny and warm.")
    with gateway_for(tokenize_only, [url], RoutingPolicy(request_timeout_s=0.5)) as base:
        client = httpx.Client(base_url=base, timeout=WAIT_S)
        server.script = lambda body: Script(ids=ids, hold_after=0)
        for stream in (False, True):
            r = chat(client, stream=stream)
            assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
        server.script = lambda body: Script(ids=ids, hold_after=2)
        events = sse(chat(client, stream=True))
        assert events[-1]["error"]["code"] == "timeout"
        assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1]) != ""


@pytest.mark.parametrize("failure", ["bad_id", "abort"])
def test_a_replica_failing_before_output_is_passed_over(tokenize_only, standin, failure):
    """An id outside the model's vocabulary (the gateway's requests carry it) or an abort of the server's own (500:
    out of memory) in a replica's first chunk: the request moves to the other replica, the client sees none of it."""
    good, url = standin
    bad = SGLangStandIn(incremental=True)
    ids = tokenize_only.encoder.encode_plain("Sunny and warm.") + [2]
    past_last = tokenize_only.tokenizer.get_vocab_size(with_added_tokens=True)
    bad.script = lambda body: (
        Script(ids=[past_last, *ids]) if failure == "bad_id" else Script(ids, abort_after=0, abort_status=500)
    )
    policy = RoutingPolicy(health_interval_s=60, failure_threshold=1, cooldown_s=60)
    with serve(bad.app) as bad_url, gateway_for(tokenize_only, [bad_url, url], policy) as base:
        client = httpx.Client(base_url=base, timeout=WAIT_S)
        for stream in (False, True, False, True):
            r = chat(client, stream=stream)
            assert r.status_code == 200, r.text
            text = "".join(e["choices"][0]["delta"].get("content", "") for e in sse(r)) if stream else r.json()
            assert "Sunny and warm." in str(text)
    assert len(bad.bodies) == 1 and len(good.bodies) == 4


def test_a_requests_own_error_in_the_stream_is_a_400_with_the_servers_message(tokenize_only, standin):
    """SGLang answers 200, then an error event for a request's ValueError (code 400, e.g. a prompt past its context):
    the client gets that 400 and the message, not a 502, and no other replica is asked."""
    server, url = standin
    server.script = lambda body: Script(ids=[1, 2], error_after=0, error_code=400)
    with gateway_for(tokenize_only, [url], RoutingPolicy(health_interval_s=60)) as base:
        client = httpx.Client(base_url=base, timeout=WAIT_S)
        for stream in (False, True):
            r = chat(client, stream=stream)
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert error["code"] == "backend_rejected" and error["message"].endswith("(400): scripted failure"), error


def test_ready_says_503_while_draining_but_requests_are_served(tokenize_only, standin):
    _, url = standin
    drain = DrainState()
    with gateway_for(tokenize_only, [url], RoutingPolicy(), drain) as base:
        client = httpx.Client(base_url=base, timeout=WAIT_S)
        assert client.get("/ready").status_code == 200
        drain.draining = True
        r = client.get("/ready")
        assert r.status_code == 503 and r.json()["draining"] is True
        assert chat(client).status_code == 200


def test_a_grammar_the_backend_would_ignore_is_refused(tokenize_only, monkeypatch):
    model = dataclasses.replace(tokenize_only, grammar_target="0.2.7")
    newer = Grammar(
        "structural_tag",
        json.dumps(
            {"type": "structural_tag", "format": {"type": "grammar", "grammar": 'root ::= "a"', "syntax": "lark"}}
        ),
    )
    monkeypatch.setattr(model.family, "grammar", lambda chat, prompt: newer)
    chat_request = ChatRequest(messages=USER, tools=[])
    with pytest.raises(APIError) as info:
        chat_grammar(model, chat_request, "prompt")
    assert info.value.status == 400 and info.value.code == "grammar_unsupported_by_backend"
    assert "lark grammars" in info.value.message and info.value.param == "response_format"
    assert chat_grammar(dataclasses.replace(model, grammar_target="0.2.9"), chat_request, "prompt") is newer
