"""Fair admission on a real gateway: tenant A floods a model whose backend runs 2 choices at once
(`max_running: 2`, the fault backend sending a token every 100 ms); B's requests still start at once or
at the next slot that frees, ahead of everything A has queued. Counted on the backend, not timed."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.faults.conftest import FaultBackend
from tests.policies.deployment import auth, burst, chat, models_config, policy_gateway, write_tenant

CAPACITY = 2
WAIT_S = 30.0


@pytest.fixture(scope="module")
def deployment(smollm2: Path, standin_backend: FaultBackend, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("fairness")
    policies = root / "policies"
    policies.mkdir()
    write_tenant(policies, "flood", models=["m"], priority="batch")
    write_tenant(policies, "other", models=["m"])
    write_tenant(policies, "third", models=["m", "solo"])
    write_tenant(policies, "impatient", models=["solo"], limits={"queue_timeout_s": 0.5})
    backend = standin_backend
    config = models_config(root / "gateway.yaml", smollm2, backend.url, ["m"], max_running=CAPACITY)
    solo = models_config(root / "solo.yaml", smollm2, backend.url, ["solo"], max_running=1)
    config.write_text(config.read_text() + solo.read_text().removeprefix("models:\n"))
    with policy_gateway(config, policies, "--audit-log", str(root / "audit")) as gateway:
        yield gateway, backend


def started(backend) -> int:
    return backend.stats()["generate_requests"]


def wait_for(condition) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def first_token(client: httpx.Client, tenant: str, max_tokens: int, backend=None) -> tuple[float, int | None]:
    """Send a stream and read it to the end: the seconds its first event took, and how many backend
    requests had started by then."""
    begun = time.monotonic()
    body = chat("m", max_tokens=max_tokens, stream=True)
    with client.stream("POST", "/v1/chat/completions", headers=auth(tenant), json=body) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        next(lines)
        took = time.monotonic() - begun
        count = started(backend) if backend else None
        for _ in lines:
            pass
    return took, count


def test_a_flooding_tenant_does_not_crowd_out_another(deployment, capsys):
    gateway, backend = deployment
    backend.set(mode="ok", delay=0.1)
    base = started(backend)
    flood = threading.Thread(
        target=lambda: asyncio.run(burst(gateway.base_url, [(auth("flood"), chat("m", max_tokens=25, n=3))] * 2))
    )
    flood.start()
    try:
        # one tenant never holds every slot: the flood runs CAPACITY - 1 choices, the rest wait
        wait_for(lambda: started(backend) - base == CAPACITY - 1)
        time.sleep(0.3)
        assert started(backend) - base == CAPACITY - 1
        with httpx.Client(base_url=gateway.base_url, timeout=WAIT_S) as client:
            free_slot, count = first_token(client, "other", 5, backend)
            assert count - base == CAPACITY  # served on the slot the flood could not take
            # every slot busy (the flood's and a long request of a third tenant): the next one to free is B's
            third = threading.Thread(target=lambda: first_token(httpx.Client(base_url=gateway.base_url), "third", 25))
            third.start()
            wait_for(lambda: started(backend) - base == CAPACITY + 1)
            before = started(backend)
            next_slot, count = first_token(client, "other", 5, backend)
            assert count == before + 1  # no choice of the flood started ahead of it
            third.join()
            backend.set(mode="ok")  # what the flood still has queued finishes fast
    finally:
        flood.join()
        backend.set(mode="ok")
    with capsys.disabled():
        print(
            f"\nfirst token of B while A floods: {free_slot:.3f} s (a slot A may not take), {next_slot:.3f} s "
            "(the next slot to free; one choice of A takes 2.5 s)"
        )


def test_a_request_that_waits_past_its_queue_deadline_is_a_429(deployment):
    gateway, backend = deployment
    backend.set(mode="ok", delay=0.2)  # the one slot of `solo` is busy for 2 s
    try:
        with httpx.Client(base_url=gateway.base_url, timeout=WAIT_S) as client:
            body = chat("solo", max_tokens=10, stream=True)
            with client.stream("POST", "/v1/chat/completions", headers=auth("third"), json=body) as holder:
                assert holder.status_code == 200
                lines = holder.iter_lines()
                next(lines)  # it holds the slot
                refused = client.post("/v1/chat/completions", headers=auth("impatient"), json=chat("solo"))
                for _ in lines:
                    pass
    finally:
        backend.set(mode="ok")
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]  # OpenAI's rate-limit shape, as the limiter's own 429s
    assert (error["type"], error["code"], refused.headers["retry-after"]) == ("requests", "rate_limit_exceeded", "1")
