"""Tenants through real HTTP on a real `gateway serve --policies` process over a fault backend process:
the (tenant, model, tool) matrix with no cross-tenant access anywhere, keys, caps, rate limits exact
under 50 parallel clients, tokens settled for streams cut mid-way, and the audit trail."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import yaml

from policies.auth import hash_key
from tests.faults.conftest import FaultBackend, replicas
from tests.faults.tcp_proxy import TcpFaultProxy
from tests.policies.deployment import (
    auth,
    burst,
    chat,
    cut_stream,
    held_text,
    key_of,
    models_config,
    policy_gateway,
    wait_for_audit,
    write_tenant,
)

MODELS = ["m-alpha", "m-beta", "m-shared"]
FAILOVER = "failover"
"""A model of two replicas: the fault backend through a fault proxy (cut in the test), then the backend itself."""
NOWHERE = "m-none"
TOOLS = ["get_weather", "search", "delete_all"]
ALLOWED_MODELS = {"alpha": {"m-alpha", "m-shared"}, "beta": {"m-beta", "m-shared"}, "gamma": set(MODELS)}
ALLOWED_TOOLS = {"alpha": {"get_weather"}, "beta": {"search"}, "gamma": set(TOOLS)}
CEILING = 3


class Deployment:
    def __init__(self, base_url: str, audit: Path, backend, gateway):
        self.base_url = base_url
        self.audit = audit
        self.backend = backend
        self.gateway = gateway

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=60)


@pytest.fixture(scope="module")
def failing_replica(standin_backend: FaultBackend) -> Iterator[TcpFaultProxy]:
    with TcpFaultProxy(standin_backend.port) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def deployment(
    smollm2: Path,
    standin_backend: FaultBackend,
    failing_replica: TcpFaultProxy,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("tenants")
    policies = root / "policies"
    policies.mkdir()
    (policies / "_defaults.yaml").write_text(f"limits:\n  max_tokens: {CEILING}\n")
    alpha = write_tenant(policies, "alpha", models=["m-alpha", "m-shared"], tools={"allow": ["get_*"]})
    second = f"- id: alpha-second\n  sha256: {hash_key(key_of('alpha2'))}\n"  # a key being rotated in
    alpha.write_text(alpha.read_text().replace("models:", second + "models:", 1))
    write_tenant(policies, "beta", models=["m-beta", "m-sh*"], tools={"allow": ["search"]})
    write_tenant(policies, "gamma", models=["m-*"], limits={"max_prompt_tokens": 400}, audit={"prompts": True})
    write_tenant(policies, "rpm20", models=["m-shared"], limits={"requests_per_minute": 20})
    write_tenant(policies, "tpm", models=["m-shared"], limits={"tokens_per_minute": 10000, "max_tokens": 64})
    write_tenant(policies, "quiet", models=["m-shared"], audit=False)
    write_tenant(policies, "tiny", models=["m-shared"], limits={"tokens_per_minute": 60})
    write_tenant(policies, "window", models=["m-shared"], limits={"tokens_per_minute": 100, "max_tokens": 4096})
    write_tenant(policies, "prometheus", metrics=True)
    write_tenant(policies, "strict", models=["m-shared"], tools={"strict": "always"})
    write_tenant(policies, FAILOVER, models=[FAILOVER], limits={"tokens_per_minute": 10000})
    expired = write_tenant(policies, "expired", models=["m-*"])
    expired.write_text(expired.read_text().replace("  sha256", "  expires: 2020-01-31\n  sha256"))
    audit = root / "audit.jsonl"
    backend = standin_backend
    config = models_config(root / "gateway.yaml", smollm2, backend.url, MODELS)
    two = replicas(FAILOVER, smollm2, [failing_replica.url_for("http"), backend.url], health_interval_s=60)
    config.write_text(yaml.safe_dump({"models": [*yaml.safe_load(config.read_text())["models"], two]}))
    with policy_gateway(config, policies, "--audit-log", str(audit)) as gateway:
        yield Deployment(gateway.base_url, audit, backend, gateway)


@pytest.fixture
def client(deployment: Deployment) -> Iterator[httpx.Client]:
    with deployment.client() as c:
        yield c


def tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}


def not_found(client: httpx.Client, tenant: str, path: str, body: dict, model: str) -> dict:
    """The 404 a model that exists nowhere gets, as it would read for `model`."""
    response = client.post(path, headers=auth(tenant), json={**body, "model": NOWHERE})
    assert response.status_code == 404, response.text
    return _renamed(response.json(), model)


def _renamed(value, model: str):
    if isinstance(value, dict):
        return {k: _renamed(v, model) for k, v in value.items()}
    return value.replace(NOWHERE, model) if isinstance(value, str) else value


@pytest.mark.parametrize("tenant", sorted(ALLOWED_MODELS))
def test_matrix_no_tenant_reaches_another_tenants_models_or_tools(client, tenant):
    listed = client.get("/v1/models", headers=auth(tenant)).json()["data"]
    assert {m["id"] for m in listed} == ALLOWED_MODELS[tenant]
    messages = [{"role": "user", "content": "hello"}]
    for model in MODELS:
        allowed = model in ALLOWED_MODELS[tenant]
        card = client.get(f"/v1/models/{model}", headers=auth(tenant))
        for path, body in (  # every door that names a model (chat: with the tools below)
            ("/tokenize", {"prompt": "hello"}),
            ("/tokenize", {"messages": messages}),
            ("/detokenize", {"tokens": [1, 2]}),
            ("/v1/completions", {"prompt": "hello", "max_tokens": 2}),
            ("/v1/responses", {"input": "hello"}),
            ("/v1/messages", {"messages": messages, "max_tokens": 2}),
            ("/v1/messages/count_tokens", {"messages": messages}),
        ):
            response = client.post(path, headers=auth(tenant), json={**body, "model": model})
            if allowed:
                assert response.status_code == 200, (tenant, model, path, response.text)
            else:
                assert response.status_code == 404, (tenant, model, path)
                assert response.json() == not_found(client, tenant, path, body, model)
        if allowed:
            assert card.status_code == 200 and card.json()["id"] == model
        else:
            nowhere = client.get(f"/v1/models/{NOWHERE}", headers=auth(tenant))
            assert card.status_code == 404 and card.json() == _renamed(nowhere.json(), model)
        for name in TOOLS:
            body = chat(model, tools=[tool("search"), tool(name)] if name != "search" else [tool(name)])
            response = client.post("/v1/chat/completions", headers=auth(tenant), json=body)
            cell = (tenant, model, name)
            if not allowed:
                assert response.status_code == 404, cell
                assert response.json() == not_found(client, tenant, "/v1/chat/completions", body, model), cell
            elif name not in ALLOWED_TOOLS[tenant] or "search" not in ALLOWED_TOOLS[tenant]:
                assert response.status_code == 403, (cell, response.text)
                error = response.json()["error"]
                bad = 0 if "search" not in ALLOWED_TOOLS[tenant] else 1
                assert error["param"] == f"tools[{bad}].function.name" and error["code"] == "tool_not_allowed", cell
            else:
                assert response.status_code == 200, (cell, response.text)
                assert response.json()["model"] == model


def test_another_tenants_stored_response_reads_as_one_that_never_existed_on_every_route(client):
    """beta reads, lists, cancels, deletes or continues alpha's stored response exactly as one that never existed."""
    stored = client.post("/v1/responses", headers=auth("alpha"), json={"model": "m-shared", "input": "hi"})
    assert stored.status_code == 200, stored.text
    rid, never = stored.json()["id"], "resp_" + "0" * 32
    continued = {"model": "m-shared", "input": "more"}
    for method, path, body, status in (
        ("GET", "/v1/responses/{id}", None, 404),
        ("GET", "/v1/responses/{id}/input_items", None, 404),
        ("POST", "/v1/responses/{id}/cancel", None, 404),
        ("DELETE", "/v1/responses/{id}", None, 404),
        ("POST", "/v1/responses", continued, 400),  # OpenAI's previous_response_not_found
    ):
        beta = [
            client.request(
                method, path.format(id=i), headers=auth("beta"), json=body and {**body, "previous_response_id": i}
            )
            for i in (rid, never)
        ]
        assert beta[0].status_code == beta[1].status_code == status, (path, beta[0].text)
        assert beta[0].text.replace(rid, never) == beta[1].text, path
    assert client.get(f"/v1/responses/{rid}", headers=auth("alpha")).json()["id"] == rid  # still there for alpha


def test_keys_missing_unknown_expired_and_header_styles(client):
    body = chat("m-shared")
    missing = client.post("/v1/chat/completions", json=body)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"
    unknown = client.post("/v1/chat/completions", json=body, headers={"authorization": "Bearer sk-nobody"})
    assert unknown.status_code == 401 and "not valid" in unknown.json()["error"]["message"]
    expired = client.post("/v1/chat/completions", json=body, headers=auth("expired"))
    assert expired.status_code == 401 and "expired on 2020-01-31" in expired.json()["error"]["message"]
    for header in ("api-key", "x-api-key"):
        assert client.get("/v1/models", headers={header: key_of("beta")}).status_code == 200
    for bearer in ("Bearer\t", "bearer  ", "BEARER \t"):  # RFC 7235 says SP; a tab or two spaces are no other key
        assert client.get("/v1/models", headers={"authorization": bearer + key_of("beta")}).status_code == 200
    two_keys = [("authorization", f"Bearer {key_of('alpha')}"), ("authorization", f"Bearer {key_of('gamma')}")]
    ambiguous = client.get("/v1/models", headers=two_keys)  # the last one used to win: which tenant, a guess
    assert ambiguous.status_code == 401 and "several different 'authorization'" in ambiguous.json()["error"]["message"]
    assert client.get("/v1/models", headers=[two_keys[0], two_keys[0]]).status_code == 200  # the same key twice


def test_the_one_key_the_gateway_knows_among_different_credentials_counts_and_two_known_keys_are_refused(client):
    """Claude Desktop's Claude Code tab sends its Anthropic session token in Authorization beside the gateway's key in
    x-api-key (a proxy may add an Authorization of its own): the gateway's key counts, whichever header brings it;
    two different keys of this gateway (one tenant's or two) are a 401 naming both headers, the same key twice is one."""
    session = {"authorization": "Bearer sk-ant-oat01-not-a-key-of-this-gateway"}
    message = {"model": "m-shared", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    for door, body in (("/v1/chat/completions", chat("m-shared")), ("/v1/messages", message)):
        answer = client.post(door, json=body, headers={**session, "x-api-key": key_of("beta")})
        assert answer.status_code == 200, (door, answer.text)
    assert client.get("/v1/models", headers={**auth("alpha"), "x-api-key": "sk-nobody"}).status_code == 200
    for other in ("gamma", "alpha2"):
        both = client.get("/v1/models", headers={**auth("alpha"), "x-api-key": key_of(other)})
        assert both.status_code == 401, other
        assert both.json()["error"]["message"] == (
            "different API keys in 'authorization' and 'x-api-key': send one API key"
        )
    refused = client.post(
        "/v1/messages", json=message, headers={"api-key": key_of("alpha"), "x-api-key": key_of("beta")}
    )
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
    assert client.get("/v1/models", headers={**auth("alpha"), "x-api-key": key_of("alpha")}).status_code == 200
    unknown = client.get("/v1/models", headers={**session, "x-api-key": "sk-nobody"})
    assert unknown.status_code == 401 and "not valid" in unknown.json()["error"]["message"]
    assert client.get("/health").status_code == 200
    described = client.get("/openapi.json")  # the API description, as vLLM serves it: no key
    assert described.status_code == 200 and "/v1/chat/completions" in described.json()["paths"]


def test_the_messages_door_refuses_a_key_in_anthropics_shape(client):
    body = {"model": "m-shared", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        for headers in ({}, {"x-api-key": "sk-nobody"}):
            refused = client.post(path, json=body, headers=headers)
            assert refused.status_code == 401, (path, headers)
            error = refused.json()
            assert error["type"] == "error" and error["error"]["type"] == "authentication_error", error
            assert "x-api-key" in error["error"]["message"] or "not valid" in error["error"]["message"]


def flat_tool(name: str) -> dict:
    """A function tool in the Responses shape."""
    return {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}


def refused_tool(client: httpx.Client, path: str, body: dict) -> dict:
    """The error of alpha's request to `path` with `body`, refused for a tool outside its allowlist."""
    response = client.post(path, headers=auth("alpha"), json=body)
    assert response.status_code == 403, response.text
    return response.json()["error"]


def test_a_tool_outside_the_allowlist_is_named_in_each_doors_body(client):
    body = {"model": "m-shared", "input": "hi", "tools": [flat_tool("search")]}
    assert refused_tool(client, "/v1/responses", body)["param"] == "tools[0].name"
    schema = {"type": "object", "properties": {}}
    body = {
        "model": "m-shared",
        "max_tokens": 2,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "get_weather", "input_schema": schema}, {"name": "search", "input_schema": schema}],
    }
    error = refused_tool(client, "/v1/messages", body)
    assert error["type"] == "permission_error" and error["message"].startswith("tools[1].name: "), error


def test_token_counts_hold_to_the_tenants_tool_rules(client):
    """/tokenize and /v1/messages/count_tokens refuse a tool outside the allowlist as the generating doors do, and
    count the prompt those doors render: with `tools.strict: always`, every tool strict."""
    schema = {"type": "object", "properties": {}}
    chat_tools = [tool("get_weather"), tool("search")]
    messages_tools = [{"name": "get_weather", "input_schema": schema}, {"name": "search", "input_schema": schema}]
    tokenize = {"model": "m-shared", "messages": [{"role": "user", "content": "hi"}], "tools": chat_tools}
    count = {"model": "m-shared", "messages": [{"role": "user", "content": "hi"}], "tools": messages_tools}
    assert refused_tool(client, "/tokenize", tokenize)["param"] == "tools[1].function.name"
    error = refused_tool(client, "/v1/messages/count_tokens", count)
    assert error["type"] == "permission_error" and error["message"].startswith("tools[1].name: "), error
    strict_tokenize = {**tokenize, "tools": [{**t, "function": {**t["function"], "strict": True}} for t in chat_tools]}
    strict_count = {**count, "tools": [{**t, "strict": True} for t in messages_tools]}
    for path, body, strict_body, field in (
        ("/tokenize", tokenize, strict_tokenize, "count"),
        ("/v1/messages/count_tokens", count, strict_count, "input_tokens"),
    ):
        as_rendered = client.post(path, headers=auth("gamma"), json=strict_body)
        counted = client.post(path, headers=auth("strict"), json=body)
        assert counted.status_code == as_rendered.status_code == 200, (counted.text, as_rendered.text)
        assert counted.json()[field] == as_rendered.json()[field], path
        plain = client.post(path, headers=auth("gamma"), json=body)
        assert plain.json()[field] != counted.json()[field], path  # the flag is in the prompt: the test can fail


def test_a_response_repeats_each_tool_strict_as_the_tenants_rule_made_it(client):
    """`tools.strict: always` holds a tool the client sent non-strict to its schema: the Response says so."""
    body = {"model": "m-shared", "input": "hi", "tools": [{**flat_tool("get_weather"), "strict": False}]}
    made = client.post("/v1/responses", headers=auth("strict"), json=body)
    assert made.status_code == 200 and made.json()["tools"][0]["strict"] is True, made.text
    assert client.post("/v1/responses", headers=auth("gamma"), json=body).json()["tools"][0]["strict"] is False


def test_a_declared_tool_outside_the_allowlist_is_refused_though_allowed_tools_leaves_it_out(client):
    kept = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [tool("get_weather")]}}
    body = chat("m-shared", tools=[tool("get_weather"), tool("search")], tool_choice=kept)
    assert refused_tool(client, "/v1/chat/completions", body)["param"] == "tools[1].function.name"
    flat = [flat_tool("get_weather"), flat_tool("search")]
    kept = {"type": "allowed_tools", "mode": "auto", "tools": flat[:1]}
    body = {"model": "m-shared", "input": "hi", "tools": flat, "tool_choice": kept}
    assert refused_tool(client, "/v1/responses", body)["param"] == "tools[1].name"


def test_a_client_set_tenant_header_changes_nothing(client):
    headers = {**auth("alpha"), "x-tenant-id": "beta", "x-llm-d-inference-fairness-id": "beta"}
    listed = client.get("/v1/models", headers=headers).json()["data"]
    assert {m["id"] for m in listed} == ALLOWED_MODELS["alpha"]
    assert client.post("/v1/chat/completions", headers=headers, json=chat("m-beta")).status_code == 404


def test_max_tokens_ceiling_default_and_prompt_size(client):
    for key in ("max_tokens", "max_completion_tokens"):
        body = {**chat("m-shared", max_tokens=None), key: CEILING + 1}
        response = client.post("/v1/chat/completions", headers=auth("gamma"), json=body)
        assert response.status_code == 400 and response.json()["error"]["param"] == key, response.text
    over = client.post(
        "/v1/completions", headers=auth("gamma"), json={"model": "m-shared", "prompt": "a", "max_tokens": 9}
    )
    assert over.status_code == 400 and over.json()["error"]["param"] == "max_tokens"
    default = client.post("/v1/chat/completions", headers=auth("gamma"), json=chat("m-shared", max_tokens=None))
    assert default.status_code == 200 and default.json()["usage"]["completion_tokens"] == CEILING
    assert default.json()["choices"][0]["finish_reason"] == "length"
    long = [{"role": "user", "content": "fox " * 500}]
    response = client.post("/v1/chat/completions", headers=auth("gamma"), json={**chat("m-shared"), "messages": long})
    assert response.status_code == 400 and response.json()["error"]["param"] == "messages", response.text
    response = client.post("/v1/completions", headers=auth("gamma"), json={"model": "m-shared", "prompt": "fox " * 500})
    assert response.status_code == 400 and response.json()["error"]["param"] == "prompt", response.text


def test_a_request_that_can_never_fit_a_token_limit_is_a_400(client):
    fits = client.post("/v1/completions", headers=auth("tiny"), json={"model": "m-shared", "prompt": "fox"})
    assert fits.status_code == 200, fits.text
    never = client.post("/v1/completions", headers=auth("tiny"), json={"model": "m-shared", "prompt": "fox " * 80})
    assert never.status_code == 400 and never.json()["error"]["code"] == "tokens_exceed_limit", never.text
    assert never.json()["error"]["param"] == "prompt"  # the prompt alone is over: no max_tokens would make it fit
    assert "retry-after" not in never.headers


def test_a_request_without_max_tokens_takes_what_the_window_leaves(client):
    """Its default budget was all tokens_per_minute leaves after its prompt, reserved whole: a 429 whenever the window
    held anything. It gets what the window leaves, and ends there (incomplete: max_output_tokens)."""
    body = {"model": "m-shared", "input": "hi"}
    first = client.post("/v1/responses", headers=auth("window"), json={**body, "max_output_tokens": 16})
    assert first.status_code == 200, first.text
    second = client.post("/v1/responses", headers=auth("window"), json=body)
    assert second.status_code == 200, second.text
    used = first.json()["usage"]["total_tokens"] + second.json()["usage"]["total_tokens"]
    assert second.json()["incomplete_details"] == {"reason": "max_output_tokens"} and used == 100
    assert second.headers["x-ratelimit-remaining-tokens"] == "0"


def test_rate_limit_headers_on_success(client):
    response = client.post("/v1/chat/completions", headers=auth("rpm20"), json=chat("m-shared"))
    assert response.status_code == 200
    assert response.headers["x-ratelimit-limit-requests"] == "20"
    assert int(response.headers["x-ratelimit-remaining-requests"]) < 20
    assert response.headers["x-ratelimit-reset-requests"].endswith("s")
    assert not any(name.startswith("anthropic-") for name in response.headers)
    body = {"model": "m-shared", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    message = client.post("/v1/messages", headers={"x-api-key": key_of("rpm20")}, json=body)
    assert message.status_code == 200, message.text
    named = {k: v for k, v in message.headers.items() if k.startswith("anthropic-ratelimit-")}
    assert set(named) == {f"anthropic-ratelimit-requests-{field}" for field in ("limit", "remaining", "reset")}
    assert named["anthropic-ratelimit-requests-limit"] == "20"
    assert named["anthropic-ratelimit-requests-remaining"] == message.headers["x-ratelimit-remaining-requests"]
    reset = named["anthropic-ratelimit-requests-reset"]  # RFC 3339, as Anthropic writes it
    assert reset.endswith("Z") and datetime.fromisoformat(reset).tzinfo is not None


def test_fifty_parallel_clients_against_20_requests_per_minute_get_exactly_20(deployment, client):
    # rpm20 has used one request in the test above when run in order; start from what the window says
    probe = client.get("/v1/models", headers=auth("rpm20"))
    assert probe.status_code == 200
    before = client.post("/v1/chat/completions", headers=auth("rpm20"), json=chat("m-shared"))
    remaining = int(before.headers["x-ratelimit-remaining-requests"])
    responses = asyncio.run(burst(deployment.base_url, [(auth("rpm20"), chat("m-shared"))] * 50))
    statuses = [r.status_code for r in responses]
    assert statuses.count(200) == remaining and statuses.count(429) == 50 - remaining, statuses
    for refused in (r for r in responses if r.status_code == 429):
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"


def test_tokens_of_streams_cut_mid_way_are_settled_as_produced(deployment, client):
    deployment.backend.set(mode="slow", after=3)
    ids = [f"cut-{i}-{time.monotonic_ns()}" for i in range(3)]
    try:
        for rid in ids:
            headers = {**auth("tpm"), "x-request-id": rid}
            body = chat("m-shared", max_tokens=40, stream=True)
            cut_stream(client, headers, body, held_text(3))
    finally:
        deployment.backend.set(mode="ok")
    lines = wait_for_audit(deployment.audit, ids)
    assert [line["completion_tokens"] for line in lines] == [3, 3, 3]
    prompt = lines[0]["prompt_tokens"]
    probe = client.post("/v1/chat/completions", headers=auth("tpm"), json=chat("m-shared", max_tokens=1))
    assert probe.status_code == 200
    assert probe.json()["usage"]["prompt_tokens"] == prompt
    used = 3 * (prompt + 3) + (prompt + 1)  # the cut streams as produced, the probe as reserved
    assert int(probe.headers["x-ratelimit-remaining-tokens"]) == 10000 - used


def test_audit_lines_name_tenant_and_key_id_never_the_key(deployment, client):
    sent = {}
    for tenant in ("alpha", "gamma", "quiet"):
        rid = f"audit-{tenant}-{time.monotonic_ns()}"
        response = client.post(
            "/v1/chat/completions",
            headers={**auth(tenant), "x-request-id": rid},
            json=chat("m-shared", max_tokens=None, stream=True),
        )
        assert response.status_code == 200
        sent[tenant] = rid
    alpha, gamma = wait_for_audit(deployment.audit, [sent["alpha"], sent["gamma"]])
    assert alpha["tenant"] == "alpha" and alpha["key_id"] == "alpha-key" and alpha["model"] == "m-shared"
    assert alpha["status"] == 200 and alpha["completion_tokens"] == CEILING and alpha["finish_reason"] == "length"
    assert alpha["prompt_tokens"] > 0 and alpha["latency_ms"] > 0 and "queue_wait_ms" in alpha
    assert "prompt" not in alpha and "fox" in gamma["prompt"]
    assert sent["quiet"] not in deployment.audit.read_text()
    written = deployment.audit.read_text() + deployment.gateway.stderr()
    assert not any(key_of(t) in written for t in ("alpha", "beta", "gamma", "quiet", "expired"))


def test_ready_shows_the_policy_store_and_no_model_id(client):
    body = client.get("/ready").json()
    served = len(MODELS) + 1  # FAILOVER too
    assert body["models"] == {"ready": served, "total": served}  # an open route: ids are for tenants
    assert body["policies"]["store"] == "memory" and body["policies"]["store_reachable"] is True
    assert body["policies"]["tenants"] == 12 and body["policies"]["problems"] == 0


def test_only_a_metrics_tenants_key_reads_metrics(client):
    """/metrics names every tenant and model: a client's key may not read it, Prometheus' (`metrics: true`) may."""
    assert client.post("/v1/chat/completions", headers=auth("alpha"), json=chat("m-alpha")).status_code == 200
    refused = client.get("/metrics", headers=auth("beta"))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "metrics_not_allowed", refused.text
    assert "alpha" not in refused.text and "m-alpha" not in refused.text
    assert client.get("/metrics").status_code == 401
    scraped = client.get("/metrics", headers=auth("prometheus"))
    assert scraped.status_code == 200 and 'tenant="alpha"' in scraped.text and 'model_name="m-alpha"' in scraped.text


def test_a_request_moved_to_another_replica_is_charged_once(deployment, client, failing_replica):
    """A replica that drops the request before any output (it reached the backend: the work was started there) and
    another that answers: one admission, one reservation, one settlement of what was produced."""
    failing_replica.set("cut", after=0, rst=True)
    ids = [f"failover-{i}-{time.monotonic_ns()}" for i in range(2)]  # the replicas take turns: one meets the cut
    for rid in ids:
        response = client.post(
            "/v1/chat/completions", headers={**auth(FAILOVER), "x-request-id": rid}, json=chat(FAILOVER, max_tokens=2)
        )
        assert response.status_code == 200, response.text
    assert failing_replica.accepted >= 1  # a request went there first
    lines = wait_for_audit(deployment.audit, ids)
    assert [line["completion_tokens"] for line in lines] == [2, 2]
    prompt = lines[0]["prompt_tokens"]
    probe = client.post("/v1/chat/completions", headers=auth(FAILOVER), json=chat(FAILOVER, max_tokens=1))
    assert probe.status_code == 200, probe.text
    used = 2 * (prompt + 2) + (prompt + 1)  # the two as produced, the probe as reserved
    assert int(probe.headers["x-ratelimit-remaining-tokens"]) == 10000 - used
    metrics = client.get("/metrics", headers=auth("prometheus")).text
    moved = f'gateway:backend_retries_total{{model_name="{FAILOVER}",replica="{failing_replica.url_for("http")}"}} '
    assert any(line.startswith(moved) and float(line[len(moved) :]) >= 1 for line in metrics.splitlines()), metrics
