"""Two `gateway serve --policies --redis` processes sharing one real redis-server (through a TCP fault proxy): limits
exact across replicas, Redis killed and restarted under load (each tenant's on_store_error, visible in /ready), and
Redis that stops answering in the middle of a request (no slot or token left counted once it answers again)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import httpx
import pytest
from redis import Redis

from policies.limits.redis_idle import IDLE_SWEEP_S
from tests.faults.conftest import FaultBackend, sse
from tests.faults.tcp_proxy import TcpFaultProxy
from tests.policies.deployment import (
    auth,
    burst,
    chat,
    cut_stream,
    held_text,
    models_config,
    policy_gateway,
    wait_for_audit,
    write_tenant,
)
from tests.redis_server import RedisServer
from tests.sockets import CLOSE_WAIT, ESTABLISHED, connections_to

PER_MODEL = {"requests_per_minute": 7}
RECOVER_S = 10.0
"""Upper bound for the gateways to use Redis again once it is back; never a speed check."""


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="module")
def redis_link(redis: RedisServer) -> Iterator[TcpFaultProxy]:
    """The gateways' way to Redis: a proxy that passes until a test breaks it."""
    with TcpFaultProxy(redis.port) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def gateways(
    smollm2: Path,
    standin_backend: FaultBackend,
    redis_link: TcpFaultProxy,
    tmp_path_factory: pytest.TempPathFactory,
):
    root = tmp_path_factory.mktemp("replicas")
    policies = root / "policies"
    policies.mkdir()
    write_tenant(policies, "rpm20", models=["m"], limits={"requests_per_minute": 20})
    write_tenant(policies, "opened", models=["m"], limits={"requests_per_minute": 10000}, on_store_error="open")
    write_tenant(policies, "closed", models=["m"], limits={"requests_per_minute": 10000}, on_store_error="closed")
    write_tenant(policies, "tpm", models=["m"], limits={"tokens_per_minute": 10000})
    write_tenant(policies, "prometheus", metrics=True)
    write_tenant(policies, "single", models=["m"], limits={"concurrent_requests": 1, "tokens_per_minute": 10000})
    write_tenant(policies, "refused", models=["m"], limits={"requests_per_minute": 10, "tokens_per_minute": 10000})
    write_tenant(policies, "conc3", models=["m"], limits={"concurrent_requests": 3})
    write_tenant(policies, "tpm1000", models=["m"], limits={"tokens_per_minute": 1000})
    write_tenant(policies, "permodel", models=["m"], limits={"requests_per_minute": 100, "models": {"m*": PER_MODEL}})
    backend = standin_backend
    with ExitStack() as stack:
        config = models_config(root / "gateway.yaml", smollm2, backend.url, ["m"])
        replicas = [
            stack.enter_context(
                policy_gateway(
                    config, policies, "--redis", redis_link.url_for("redis"), "--audit-log", str(root / f"{i}")
                )
            )
            for i in range(2)
        ]
        yield replicas, backend, root


def test_fifty_clients_on_two_replicas_against_20_requests_per_minute_get_exactly_20(gateways):
    gateways = gateways[0]

    async def both():
        halves = [burst(g.base_url, [(auth("rpm20"), chat("m"))] * 25) for g in gateways]
        return [r for half in await asyncio.gather(*halves) for r in half]

    statuses = Counter(r.status_code for r in asyncio.run(both()))
    assert statuses == {200: 20, 429: 30}


def test_a_models_own_limit_is_exact_across_replicas_and_its_refusals_name_the_model(gateways):
    """`limits.models` through real HTTP: 20 requests at once on the two replicas, the model's 7 per minute admitted
    exactly (the tenant's own 100 left room), each 429 naming the model's limit with its headers."""
    gateways = gateways[0]

    async def both():
        halves = [burst(g.base_url, [(auth("permodel"), chat("m"))] * 10) for g in gateways]
        return [r for half in await asyncio.gather(*halves) for r in half]

    responses = asyncio.run(both())
    assert Counter(r.status_code for r in responses) == {200: 7, 429: 13}
    for refused in (r for r in responses if r.status_code == 429):
        assert refused.json()["error"]["message"] == "rate limit reached: requests_per_minute for the model 'm'"
        assert refused.headers["x-ratelimit-limit-requests"] == "7"
        assert refused.headers["x-ratelimit-remaining-requests"] == "0" and int(refused.headers["retry-after"]) >= 1


def test_concurrency_and_tokens_are_exact_across_replicas_under_one_burst(gateways):
    """Slow answers, so that no request ends while the burst is admitted: 3 concurrent requests on the two replicas
    together, and as many requests as 1000 tokens per minute hold (prompt + max_tokens each)."""
    gateways, backend, _ = gateways
    backend.set(mode="ok", delay=0.05)

    async def both():
        sent = [(auth("conc3"), chat("m", max_tokens=20))] * 12 + [(auth("tpm1000"), chat("m", max_tokens=100))] * 12
        halves = [burst(g.base_url, sent[i::2]) for i, g in enumerate(gateways)]
        return [r for half in await asyncio.gather(*halves) for r in half]

    try:
        answers = asyncio.run(both())
    finally:
        backend.set(mode="ok")
    by_tenant = {
        t: [a for a in answers if a.request.headers["authorization"] == auth(t)["authorization"]]
        for t in ("conc3", "tpm1000")
    }
    assert Counter(a.status_code for a in by_tenant["conc3"]) == {200: 3, 429: 9}
    served = [a for a in by_tenant["tpm1000"] if a.status_code == 200]
    prompt = served[0].json()["usage"]["prompt_tokens"]
    assert len(served) == 1000 // (prompt + 100) and len(by_tenant["tpm1000"]) == 12


def test_streams_cut_on_one_replica_are_settled_as_produced_for_both(gateways):
    gateways, backend, root = gateways
    backend.set(mode="slow", after=3)
    ids = [f"cut-{i}-{time.monotonic_ns()}" for i in range(2)]
    try:
        with httpx.Client(base_url=gateways[0].base_url, timeout=30) as client:
            for rid in ids:
                cut_stream(
                    client, {**auth("tpm"), "x-request-id": rid}, chat("m", max_tokens=40, stream=True), held_text(3)
                )
    finally:
        backend.set(mode="ok")
    lines = wait_for_audit(root / "0", ids)
    assert [line["completion_tokens"] for line in lines] == [3, 3]
    prompt = lines[0]["prompt_tokens"]
    probe = httpx.post(f"{gateways[1].base_url}/v1/chat/completions", headers=auth("tpm"), json=chat("m", max_tokens=1))
    assert probe.status_code == 200 and probe.json()["usage"]["prompt_tokens"] == prompt
    assert int(probe.headers["x-ratelimit-remaining-tokens"]) == 10000 - 2 * (prompt + 3) - (prompt + 1)


def test_a_request_the_backend_refused_before_any_output_counts_on_no_replica(gateways):
    """The backend refuses (503) before the first token: the client gets that error and nothing else, so neither
    replica counts its request or tokens (the 503 itself says what remains)."""
    gateways, backend, _ = gateways
    backend.set(mode="refuse503")
    try:
        refused = httpx.post(f"{gateways[0].base_url}/v1/chat/completions", headers=auth("refused"), json=chat("m"))
    finally:
        backend.set(mode="ok")
    assert refused.status_code == 503, refused.text
    assert refused.headers["x-ratelimit-remaining-requests"] == "10"
    assert refused.headers["x-ratelimit-remaining-tokens"] == "10000"
    probe = httpx.post(f"{gateways[1].base_url}/v1/chat/completions", headers=auth("refused"), json=chat("m"))
    assert probe.status_code == 200, probe.text
    assert probe.headers["x-ratelimit-remaining-requests"] == "9"  # the probe's alone
    assert int(probe.headers["x-ratelimit-remaining-tokens"]) == 10000 - probe.json()["usage"]["prompt_tokens"] - 2


def test_redis_killed_and_restarted_under_load(gateways, redis):
    gateways = gateways[0]
    seen: dict[str, Counter] = {"opened": Counter(), "closed": Counter()}
    stop = threading.Event()

    def load(tenant: str, base_url: str) -> None:
        with httpx.Client(base_url=base_url, timeout=30) as client:
            while not stop.is_set():
                seen[tenant][client.post("/v1/chat/completions", headers=auth(tenant), json=chat("m")).status_code] += 1

    threads = [threading.Thread(target=load, args=(t, g.base_url)) for t in seen for g in gateways]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: seen["closed"][200] >= 4)
        redis.kill()
        wait_until(lambda: seen["closed"][503] >= 4 and seen["opened"][200] >= 20)
        for gateway in gateways:
            assert httpx.get(f"{gateway.base_url}/ready").json()["policies"]["store_reachable"] is False
        before = seen["closed"][200]
        redis.start()
        wait_until(lambda: seen["closed"][200] >= before + 4)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert set(seen["opened"]) == {200}, seen  # fails open: never refused
    assert set(seen["closed"]) == {200, 503}, seen  # fails closed: 503 while Redis is away, never a 500
    for gateway in gateways:
        assert httpx.get(f"{gateway.base_url}/ready").json()["policies"]["store_reachable"] is True
        assert "limiter store error" in gateway.stderr()
        scrape = httpx.get(f"{gateway.base_url}/metrics", headers=auth("prometheus")).text
        errors = metric(scrape, "gateway:limiter_store_errors_total")
        assert errors >= 4, errors  # each refused (503) or admitted-open request counted
        wait_until(partial(settled, gateway.base_url))  # what the outage missed landed once it answered
        assert metric(scrape, "gateway:limiter_settles_dropped_total") == 0


def settled(base_url: str) -> bool:
    """No settlement waits in the gateway's backlog."""
    scrape = httpx.get(f"{base_url}/metrics", headers=auth("prometheus")).text
    return metric(scrape, "gateway:limiter_settles_pending") == 0


def metric(exposition: str, name: str) -> float:
    """The value of the unlabelled sample `name` in a Prometheus exposition."""
    return next(float(line.split()[-1]) for line in exposition.splitlines() if line.startswith(name + " "))


def wait_until(condition, timeout: float = RECOVER_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.05)


def test_idle_gateways_close_the_redis_connections_the_server_dropped(gateways, redis, redis_link):
    """`CLIENT KILL` while both replicas are idle: their limiter's and store's sockets leave CLOSE-WAIT within the
    bound (without the sweep they stay there until the next command), and the next requests use Redis again
    (tenant `closed` is refused with a 503 when its limiter cannot reach Redis)."""
    gateways = gateways[0]
    for gateway in gateways:
        assert httpx.post(f"{gateway.base_url}/v1/chat/completions", headers=auth("closed"), json=chat("m")).is_success
        stored = httpx.post(
            f"{gateway.base_url}/v1/responses",
            headers=auth("closed"),
            json={"model": "m", "input": "hi", "max_output_tokens": 16},
        )
        assert stored.is_success, stored.text
    pooled = connections_to(redis_link.port, ESTABLISHED)
    with Redis(host="127.0.0.1", port=redis.port) as admin:
        assert admin.client_kill_filter(_type="normal", skipme=True) >= 4  # two pools in each replica
    # each pooled connection the proxy closed in turn (it left ESTABLISHED) and then closed by its gateway (it left
    # CLOSE-WAIT): waiting for no CLOSE-WAIT alone passed before the proxy had closed them, and the next request met
    # the close
    wait_until(lambda: not pooled & connections_to(redis_link.port, ESTABLISHED, CLOSE_WAIT), IDLE_SWEEP_S * 5)
    for gateway in gateways:
        again = httpx.get(f"{gateway.base_url}/v1/responses/{stored.json()['id']}", headers=auth("closed"))
        assert again.status_code == 200, again.text  # the store shared by both answers again
        assert httpx.post(f"{gateway.base_url}/v1/chat/completions", headers=auth("closed"), json=chat("m")).is_success


def test_redis_that_stops_answering_mid_request(gateways, redis, redis_link):
    """Redis stops answering (what the gateways send is lost) while a stream of tenant `single` (one request at a
    time) runs: its stream goes on, new requests get a clear 503 (fail closed) or pass (fail open), and once Redis
    answers again the slot and tokens of the stream that ended meanwhile are settled: nothing stays counted."""
    gateways, backend, _ = gateways
    first, second = (httpx.Client(base_url=g.base_url, timeout=30) for g in gateways)
    backend.set(mode="slow", after=3)
    try:
        body = chat("m", max_tokens=40, stream=True)
        held, content = held_text(3), ""
        with first.stream("POST", "/v1/chat/completions", headers=auth("single"), json=body) as stream:
            assert stream.status_code == 200
            events = sse(stream)  # held: a generator let go of closes the stream (and so the request) at once
            for event in events:
                content += "".join(c["delta"].get("content") or "" for c in event["choices"])
                if len(content) >= len(held):
                    break
            redis_link.set("blackhole")  # while the stream runs
            refused = second.post("/v1/chat/completions", headers=auth("single"), json=chat("m"))
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "rate_limit_store_unavailable" and refused.headers["retry-after"]
            assert second.post("/v1/chat/completions", headers=auth("opened"), json=chat("m")).status_code == 200
        # the client left: the gateway's settlement of the stream is lost with the link
    finally:
        backend.set(mode="ok")
    wait_until(lambda: "limiter store error during settle for tenant single" in gateways[0].stderr())
    redis_link.set("pass")
    answers: list[httpx.Response] = []

    def served() -> bool:
        answers.append(second.post("/v1/chat/completions", headers=auth("single"), json=chat("m")))
        return answers[-1].status_code == 200

    wait_until(served)
    assert {a.status_code for a in answers[:-1]} <= {429}, [a.text for a in answers]  # the slot until it settles
    prompt = answers[-1].json()["usage"]["prompt_tokens"]
    with Redis(host="127.0.0.1", port=redis.port) as admin:
        wait_until(lambda: admin.zcard("gw:limits:{single}:slots") == 0)  # the last request's settlement too
        assert not list(admin.scan_iter("gw:limits:{single}:c2:*"))  # every charge settled and closed
        window = sorted(int(v) for v in admin.hvals("gw:limits:{single}:wa2"))
    assert window == [prompt + 2, prompt + 3]  # as used: the stream's 3 tokens, the last request's 2; no 503 counted
    first.close()
    second.close()


def test_a_burst_while_redis_runs_commands_but_never_answers(gateways, redis, redis_link):
    """Redis runs what a gateway sends but no answer comes back (a stall) while 40 requests of a tenant failing open
    and 40 failing closed arrive at once: each gets its answer (200 / 503) once its call timed out, and once Redis
    answers again every admit it ran meanwhile is given back (no window entry from the burst stays)."""
    gateway = gateways[0][0]
    requests = [(auth(t), chat("m")) for t in ("opened", "closed") for _ in range(40)]
    assert {a.status_code for a in asyncio.run(burst(gateway.base_url, requests))} == {200}  # pooled connections
    with Redis(host="127.0.0.1", port=redis.port) as admin:
        seconds, micros = admin.time()
        stalled_at_ms = seconds * 1000 + micros // 1000
        redis_link.set("stall")
        try:
            answers = asyncio.run(burst(gateway.base_url, requests))
        finally:
            redis_link.set("pass")
        assert [a.status_code for a in answers] == [200] * 40 + [503] * 40
        assert {a.json()["error"]["code"] for a in answers[40:]} == {"rate_limit_store_unavailable"}
        wait_until(partial(settled, gateway.base_url))
        ran = [admin.zcount(f"gw:limits:{{{t}}}:w2", stalled_at_ms, "+inf") for t in ("opened", "closed")]
    assert ran == [0, 0]
    scrape = httpx.get(f"{gateway.base_url}/metrics", headers=auth("prometheus")).text
    assert metric(scrape, "gateway:limiter_settles_dropped_total") == 0
