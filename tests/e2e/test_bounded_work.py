"""Bounded work on the real gateway process (the session gateway: `gateway serve`, embedded model, defaults): a
schema whose grammar costs more than the default compile budget is a 400 naming it, the compile's child process is
gone, and the model keeps answering; n above the bundled worker's slots is a 400 naming `n`."""

from __future__ import annotations

import httpx

from gateway.process.config import WORKER_SLOTS
from tests.e2e.conftest import pid_alive

USER = [{"role": "user", "content": "Name a city."}]
BIG_ENUM = {"type": "object", "properties": {"city": {"enum": [f"city_{i}_x" for i in range(60000)]}}}
"""20,000 such strings took 2.1 s to compile on SmolLM2's vocabulary (one thread): three times that is well over the
default budget of 2 s of CPU (and costs no more than the budget: the compile is killed there)."""


def test_a_schema_over_the_compile_budget_is_a_400_and_the_model_keeps_answering(gateway, model_id):
    with httpx.Client(base_url=gateway.base_url, timeout=120) as client:
        body = {
            "model": model_id,
            "messages": USER,
            "max_tokens": 4,
            "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": BIG_ENUM}},
        }
        answer = client.post("/v1/chat/completions", json=body)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert (error["code"], error["param"]) == ("grammar_too_complex", "response_format.json_schema.schema")
        assert 'result="over_budget"} 1.0' in client.get("/metrics").text
        assert all(pid_alive(pid) for pid in gateway.children())  # the killed compiler is reaped, not a zombie
        del body["response_format"]
        assert client.post("/v1/chat/completions", json=body).status_code == 200


def test_n_above_the_workers_slots_is_a_400_naming_n(gateway, model_id):
    body = {"model": model_id, "messages": USER, "max_tokens": 2, "n": WORKER_SLOTS + 1}
    answer = httpx.post(f"{gateway.base_url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "n"
