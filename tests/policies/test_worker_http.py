"""Policies in front of the real embedded model on its bundled worker (8 slots): tenant isolation, usage
settled as generated, and a 1-token request of one tenant while another's `n: 16` request runs."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from backends.checkpoint import EMBEDDED_MODEL_ID
from tests.e2e.conftest import NO_GRAMMAR_WARMUP, GatewayProcess
from tests.faults.conftest import sse
from tests.policies.deployment import audit_lines, auth, chat, write_tenant

WAIT_S = 300.0
BULK_TOKENS = 8


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("worker")
    policies = root / "policies"
    policies.mkdir()
    write_tenant(policies, "bulk", models=["smollm2-*"], priority="batch")
    write_tenant(policies, "chatty", models=[EMBEDDED_MODEL_ID])
    write_tenant(policies, "elsewhere", models=["other-*"])
    audit = root / "audit"
    process = GatewayProcess(
        "--default-max-tokens", "64", "--policies", str(policies), "--audit-log", str(audit), NO_GRAMMAR_WARMUP
    )
    try:
        yield process, audit
    finally:
        process.stop()


def test_tenants_on_the_real_worker(gateway, capsys):
    process, audit = gateway
    with httpx.Client(base_url=process.base_url, timeout=WAIT_S) as client:
        assert client.get("/v1/models", headers=auth("elsewhere")).json()["data"] == []
        hidden = client.post("/v1/chat/completions", headers=auth("elsewhere"), json=chat(EMBEDDED_MODEL_ID))
        assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "model_not_found"

        small, small_latency, bulk = small_while_bulk_runs(client, auth("bulk"), auth("chatty"), BULK_TOKENS)
    assert small.status_code == 200 and small.json()["usage"]["completion_tokens"] == 1
    assert bulk["tokens"] == 16 * BULK_TOKENS
    lines = settled_audit_lines(audit, tenants={"chatty", "bulk"})
    assert lines["worker-small"]["completion_tokens"] == 1 and lines["worker-small"]["tenant"] == "chatty"
    bulk_line = next(line for line in lines.values() if line["tenant"] == "bulk")
    assert bulk_line["completion_tokens"] == 16 * BULK_TOKENS and bulk_line["queue_wait_ms"] > 0
    with capsys.disabled():
        print(
            f"\n1-token request while another tenant's n=16 x {BULK_TOKENS} tokens runs: {small_latency:.2f} s "
            f"(the n=16 request took {bulk['latency']:.2f} s; its later choices queued {bulk_line['queue_wait_ms']:.0f} ms)"
        )


def settled_audit_lines(audit, tenants: set[str], wait_s: float = 30.0) -> dict[str, dict]:
    """The audit lines by request id once every tenant in `tenants` has one: a stream's line is written as its
    response ends, which may be a moment after the client read its last event."""
    deadline = time.monotonic() + wait_s
    while True:
        lines = {line["request_id"]: line for line in audit_lines(audit)}
        if tenants <= {line["tenant"] for line in lines.values()} or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def small_while_bulk_runs(
    client: httpx.Client, bulk_headers: dict[str, str], small_headers: dict[str, str], tokens: int = 24
) -> tuple[httpx.Response, float, dict[str, float]]:
    """Stream one `n: 16` request of `tokens` tokens each; once 7 of its choices decode, send a 1-token
    request: its response, the seconds it took, and the bulk request's latency and completion tokens."""
    bulk: dict[str, float] = {}
    decoding = threading.Event()

    def flood() -> None:
        begun = time.monotonic()
        body = chat(EMBEDDED_MODEL_ID, max_tokens=tokens, n=16, ignore_eos=True, temperature=1.0, stream=True)
        body["stream_options"] = {"include_usage": True}
        seen: set[int] = set()
        with client.stream("POST", "/v1/chat/completions", headers=bulk_headers, json=body) as response:
            assert response.status_code == 200
            for event in sse(response):
                if isinstance(event, dict):
                    seen |= {c["index"] for c in event["choices"] if c["delta"].get("content")}
                    if len(seen) >= 7:
                        decoding.set()
                    if event.get("usage"):
                        bulk["tokens"] = event["usage"]["completion_tokens"]
        bulk["latency"] = time.monotonic() - begun

    thread = threading.Thread(target=flood)
    thread.start()
    assert decoding.wait(WAIT_S)
    begun = time.monotonic()
    small = client.post(
        "/v1/chat/completions",
        headers={**small_headers, "x-request-id": "worker-small"},
        json=chat(EMBEDDED_MODEL_ID, 1),
    )
    small_latency = time.monotonic() - begun
    thread.join()
    return small, small_latency, bulk
