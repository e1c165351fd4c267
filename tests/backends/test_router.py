"""Router over real HTTP: SGLang clients to stand-in servers that follow SGLang's published contract."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, aclosing, asynccontextmanager, suppress

import pytest

from backends.base import (
    BackendError,
    GenerateChunk,
    GenerateRequest,
    MalformedStream,
    SamplingParams,
    TokenLogprob,
    check_vocabulary,
)
from backends.discovery import DNSService
from backends.observer import RouterObserver
from backends.router import Router, RoutingPolicy
from backends.sglang import SGLangBackend
from tests.gateway.http_server import dead_url, serve
from tests.gateway.sglang_standin import Script, SGLangStandIn

pytestmark = pytest.mark.anyio
IDS = list(range(10, 20))
FAST = RoutingPolicy(health_interval_s=0.1, health_timeout_s=1.0, cooldown_s=0.2)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def standins() -> Iterator[list[tuple[SGLangStandIn, str]]]:
    """Three live stand-ins (incremental mode), each playing IDS."""
    with ExitStack() as stack:
        out = []
        for _ in range(3):
            server = SGLangStandIn(incremental=True)
            server.script = lambda body: Script(ids=IDS)
            out.append((server, stack.enter_context(serve(server.app))))
        yield out


def router(urls: list[str], policy: RoutingPolicy = FAST) -> Router:
    return Router(lambda url: SGLangBackend(url, incremental=True), urls=urls, policy=policy)


def request(rid: str, prompt: list[int] | None = None, max_new_tokens: int = 16) -> GenerateRequest:
    return GenerateRequest(rid=rid, input_ids=prompt or [1, 2, 3], sampling=SamplingParams(max_new_tokens))


async def output(r: Router, req: GenerateRequest) -> list[int]:
    return [i async for chunk in r.generate(req) for i in chunk.output_ids]


async def test_spreads_by_least_outstanding(standins):
    for server, _ in standins:
        server.script = lambda body: Script(ids=IDS, hold_after=1)
    r = router([url for _, url in standins])
    streams = [r.generate(request(f"r{i}")) for i in range(6)]
    try:
        for s in streams:
            await anext(s)  # each request is now outstanding on its replica
        assert sorted(len(server.bodies) for server, _ in standins) == [2, 2, 2]
        assert [rep.outstanding for rep in r.replicas] == [2, 2, 2]
    finally:
        for s in streams:
            await s.aclose()
        await r.close()
    assert [rep.outstanding for rep in r.replicas] == [0, 0, 0]


async def test_long_shared_prefix_prefers_one_replica_until_it_is_loaded(standins):
    r = router([url for _, url in standins])
    system = list(range(1000, 1300))  # a 300-token shared prefix (tools, system prompt)
    try:
        for i in range(6):
            assert await output(r, request(f"a{i}", system + [i])) == IDS
        assert sorted(len(server.bodies) for server, _ in standins) == [0, 0, 6]
        # short prompts carry no affinity: they go round
        for i in range(3):
            await output(r, request(f"s{i}", [i]))
        assert sorted(len(server.bodies) for server, _ in standins) == [1, 1, 7]
        # load on the preferred replica beyond the slack sends the prefix elsewhere
        home = next(server for server, _ in standins if len(server.bodies) == 7)
        home.script = lambda body: Script(ids=IDS, hold_after=1)
        held = [r.generate(request(f"h{i}", system + [50 + i])) for i in range(3)]
        for s in held:
            await anext(s)
        assert len(home.bodies) == 7 + 3  # within the slack (2 above the least loaded) it still wins
        await output(r, request("moved", system + [99]))
        assert len(home.bodies) == 10
        for s in held:
            await s.aclose()
    finally:
        await r.close()


async def test_refused_connection_is_retried_elsewhere_and_opens_the_breaker(standins):
    server, url = standins[0]
    doomed = SGLangStandIn(incremental=True)
    doomed.script = lambda body: Script(ids=IDS)
    with ExitStack() as stack:
        doomed_url = stack.enter_context(serve(doomed.app))
        r = router([doomed_url, url], RoutingPolicy(health_interval_s=60, failure_threshold=2, cooldown_s=60))
        try:
            assert await r.ready()  # both pass their first health check
            stack.close()  # then one dies: its port refuses connections until the next check
            for i in range(4):
                assert await output(r, request(f"r{i}")) == IDS
            assert len(server.bodies) == 4
            assert not r.replicas[0].breaker.available()  # open after two refused connections
        finally:
            await r.close()


async def test_a_replica_that_refuses_connections_fails_its_health_check(standins):
    _, url = standins[0]
    dead = dead_url()
    r = router([dead, url])
    try:
        assert await output(r, request("a")) == IDS
        assert [rep.healthy for rep in r.replicas] == [False, True]
    finally:
        await r.close()


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_overload_and_server_errors_are_retried_before_any_output(standins, status):
    (bad, bad_url), (good, good_url) = standins[:2]
    bad.script = lambda body: Script(refuse=status)
    r = router([bad_url, good_url], RoutingPolicy(health_interval_s=60))
    try:
        for i in range(2):
            assert await output(r, request(f"r{i}")) == IDS
        assert len(bad.bodies) == 1 and len(good.bodies) == 2
    finally:
        await r.close()


class Failovers(RouterObserver):
    """The replicas a request was moved off, as the router tells its observer."""

    def __init__(self) -> None:
        self.moved: list[str] = []

    def retried(self, replica: str, error: BackendError) -> None:
        self.moved.append(replica)


@asynccontextmanager
async def silent_on_generate() -> AsyncIterator[str]:
    """A server that answers its health check, then takes every generation request and never answers it (its
    socket stays open: a hung replica); yields its URL."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(ConnectionError, asyncio.IncompleteReadError):
            while (await reader.readuntil(b"\r\n\r\n")).startswith(b"GET /health"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await reader.read()  # the request's body, then nothing until the client gives up
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def test_a_replica_that_takes_requests_but_never_answers_is_left_for_another(standins):
    good, good_url = standins[0]
    async with silent_on_generate() as silent_url:
        r = Router(
            lambda url: SGLangBackend(url, incremental=True, head_timeout=0.05),
            urls=[silent_url, good_url],
            policy=RoutingPolicy(health_interval_s=60, failure_threshold=2, cooldown_s=60),
        )
        r.observer = failovers = Failovers()
        try:
            for i in range(4):
                assert await output(r, request(f"r{i}")) == IDS
            assert len(good.bodies) == 4
            assert failovers.moved == [silent_url, silent_url]  # each fails once, then its breaker opens
            assert not r.replicas[0].breaker.available()
        finally:
            await r.close()


async def test_a_failure_with_no_other_replica_to_take_it_is_no_failover(standins):
    bad, bad_url = standins[0]
    bad.script = lambda body: Script(refuse=503)
    r = router([bad_url], RoutingPolicy(health_interval_s=60))
    r.observer = failovers = Failovers()
    try:
        with pytest.raises(BackendError) as info:
            await output(r, request("r"))
        assert info.value.status == 503 and failovers.moved == []
    finally:
        await r.close()


MALFORMED = {
    "invalid-json": b'data: {"output_ids": [1\n\n',
    "wrong-shape": b'data: {"output_ids": "not ids", "meta_info": {}}\n\n',
    "not-an-object": b"data: [1, 2]\n\n",
}
"""First events no SGLang server sends: the replica broke the protocol."""


@pytest.mark.parametrize("garbage", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_malformed_stream_before_any_output_is_failed_over(standins, garbage):
    (bad, bad_url), (good, good_url) = standins[:2]
    bad.script = lambda body: Script(ids=IDS, garbage_after=0, garbage=garbage)
    r = router([bad_url, good_url], RoutingPolicy(health_interval_s=60, failure_threshold=1, cooldown_s=60))
    r.observer = failovers = Failovers()
    try:
        for i in range(2):  # one of the two goes to the broken replica first
            assert await output(r, request(f"r{i}")) == IDS
        assert len(bad.bodies) == 1 and len(good.bodies) == 2 and failovers.moved == [bad_url]
        assert [rep.breaker.available() for rep in r.replicas] == [False, True]  # a failure of its replica
    finally:
        await r.close()


@pytest.mark.parametrize("replicas, max_attempts, tries", [(1, 3, 1), (2, 3, 2), (3, 2, 2)])
async def test_a_malformed_stream_with_no_other_replica_to_try_is_a_502(standins, replicas, max_attempts, tries):
    """Broken, not busy: a 502 naming what was wrong (no 503, no Retry-After), each replica tried once at most,
    `max_attempts` in all."""
    for server, _ in standins:
        server.script = lambda body: Script(ids=IDS, garbage_after=0, garbage=MALFORMED["invalid-json"])
    r = router([url for _, url in standins[:replicas]], RoutingPolicy(health_interval_s=60, max_attempts=max_attempts))
    r.observer = failovers = Failovers()
    try:
        with pytest.raises(BackendError) as info:
            await output(r, request("r"))
    finally:
        await r.close()
    error = info.value
    assert (error.status, error.retryable, error.retry_after) == (502, False, None)
    assert str(error).startswith("backend sent invalid JSON in its stream"), error
    assert (f"(the last of {tries} replicas tried)" in str(error)) == (tries > 1), error
    assert sorted(len(server.bodies) for server, _ in standins) == [0] * (3 - tries) + [1] * tries
    assert len(failovers.moved) == tries - 1


async def test_client_errors_are_not_retried(standins):
    (bad, bad_url), (good, good_url) = standins[:2]
    bad.script = lambda body: Script(refuse=400)
    r = router([bad_url, good_url], RoutingPolicy(health_interval_s=60))
    try:
        results = []
        for i in range(2):
            try:
                results.append(await output(r, request(f"r{i}")))
            except BackendError as e:
                results.append(e.status)
        assert sorted(results, key=str) == [400, IDS]
        assert len(bad.bodies) == 1 and len(good.bodies) == 1
        assert all(rep.breaker.available() for rep in r.replicas)  # a refusal is not a failure
    finally:
        await r.close()


ONE_FAILURE = RoutingPolicy(health_interval_s=60, failure_threshold=1, cooldown_s=60)
"""A replica that failed once is not chosen again (its breaker opens): which replica took what is certain."""
VOCAB = 100
"""The vocabulary of the requests below: IDS are in it."""


@pytest.mark.parametrize("bad_id", [-1, VOCAB, 2**40])
async def test_an_id_outside_the_vocabulary_before_any_output_is_failed_over(standins, bad_id):
    """A first chunk with an id the tokenizer does not have is a malformed stream: the replica's, moved elsewhere.
    (After output the detokenizer refuses it, an error on the stream: tests/faults.)"""
    (bad, bad_url), (good, good_url) = standins[:2]
    bad.script = lambda body: Script(ids=[bad_id, *IDS])
    r = router([bad_url, good_url], ONE_FAILURE)
    r.observer = failovers = Failovers()
    try:
        for i in range(2):  # one of the two goes to the broken replica first
            assert await output(r, vocab_request(f"r{i}")) == IDS
        assert len(bad.bodies) == 1 and len(good.bodies) == 2 and failovers.moved == [bad_url]
    finally:
        await r.close()


async def test_an_id_outside_the_vocabulary_with_no_other_replica_is_a_502(standins):
    bad, bad_url = standins[0]
    bad.script = lambda body: Script(ids=[VOCAB, *IDS])
    r = router([bad_url], RoutingPolicy(health_interval_s=60))
    try:
        with pytest.raises(MalformedStream, match=f"token id {VOCAB}, outside the vocabulary \\(0 to {VOCAB - 1}\\)"):
            await output(r, vocab_request("r"))
    finally:
        await r.close()


@pytest.mark.parametrize(
    "chunk, bad",
    [
        (GenerateChunk([5, VOCAB - 1]), None),
        (GenerateChunk([5, VOCAB, -1]), VOCAB),
        (GenerateChunk([], finish_reason="stop"), None),
        (GenerateChunk([5], [TokenLogprob(5, -0.1, [(5, -0.1), (VOCAB - 1, -2.0)])]), None),
        (GenerateChunk([5], [TokenLogprob(5, -0.1, [(5, -0.1), (VOCAB + 7, -2.0)])]), VOCAB + 7),
        (GenerateChunk([5], [TokenLogprob(-3, -0.1)]), -3),
    ],
)
def test_the_first_chunk_check_reads_its_ids_and_logprob_candidates(chunk, bad):
    """Every id the gateway would look up (the output's, a logprob's token and candidates) is checked, the first
    outside the vocabulary named."""
    if bad is None:
        check_vocabulary(chunk, VOCAB)
    else:
        with pytest.raises(MalformedStream, match=f"token id {bad}, outside"):
            check_vocabulary(chunk, VOCAB)


def vocab_request(rid: str) -> GenerateRequest:
    return GenerateRequest(rid=rid, input_ids=[1, 2, 3], sampling=SamplingParams(16), vocab_size=VOCAB)


FAILURES = {
    "error-event-400": (Script(ids=IDS, error_after=0, error_code=400), 400),
    "error-event-503": (Script(ids=IDS, error_after=0, error_code=503), None),
    "error-event-no-code": (Script(ids=IDS, error_after=0), 502),
    "abort-400": (Script(ids=IDS, abort_after=0, abort_status=400), 400),
    "abort-500": (Script(ids=IDS, abort_after=0, abort_status=500), None),
    "abort-503": (Script(ids=IDS, abort_after=0, abort_status=503), None),
    "abort-plain": (Script(ids=IDS, abort_after=0), None),
}
"""A 200, then a failure SGLang reports in the stream, and the status the client gets (None: failed over). SGLang's
error event is a request's ValueError (code 400; one with no code says nothing of whose it is: a 502); an abort's status_code says whose it is: 400 the request's
(prompt past the KV budget, a bad stop_regex), 500 the server's (out of memory, a grammar or sampler fault), 503
busy (retracted, timed out), none a plain abort (/abort_request, a paused or stopping server)."""


@pytest.mark.parametrize("script, status", FAILURES.values(), ids=FAILURES.keys())
async def test_a_failure_the_stream_reports_before_output_is_the_requests_or_failed_over(standins, script, status):
    (bad, bad_url), (good, good_url) = standins[:2]
    bad.script = lambda body: script
    r = router([bad_url, good_url], ONE_FAILURE)
    r.observer = failovers = Failovers()
    try:
        results = []
        for i in range(2):  # one of the two goes to the failing replica first
            try:
                results.append(await output(r, request(f"r{i}")))
            except BackendError as e:
                results.append((e.status, e.retryable, str(e)))
    finally:
        await r.close()
    if status is None:
        assert results == [IDS, IDS] and len(bad.bodies) == 1 and len(good.bodies) == 2
        assert failovers.moved == [bad_url]
    else:  # the request's own: passed on with the server's message, not tried elsewhere
        refusal = next(x for x in results if x != IDS)
        assert refusal[:2] == (status, False) and "scripted" in refusal[2], refusal
        assert len(bad.bodies) == 1 and len(good.bodies) == 1 and failovers.moved == []


async def test_failure_after_output_is_not_retried(standins):
    for server, _ in standins:
        server.script = lambda body: Script(ids=IDS, error_after=3)
    r = router([url for _, url in standins], RoutingPolicy(health_interval_s=60))
    got: list[int] = []
    try:
        with pytest.raises(BackendError):
            async for chunk in r.generate(request("r")):
                got += chunk.output_ids
        assert got == IDS[:3]
        assert sum(len(server.bodies) for server, _ in standins) == 1
    finally:
        await r.close()


async def test_deadline_before_first_token_is_a_504_and_aborts(standins):
    server, url = standins[0]
    server.script = lambda body: Script(ids=IDS, hold_after=0)
    r = router([url], RoutingPolicy(request_timeout_s=0.3, health_interval_s=60))
    try:
        with pytest.raises(BackendError) as info:
            await output(r, request("slow"))
        assert (info.value.status, info.value.code) == (504, "timeout")
        assert await asyncio.to_thread(server.closed["slow"].wait, 30)
        assert await asyncio.to_thread(server.aborted["slow"].wait, 30)
        assert r.replicas[0].breaker.available()  # slow is not broken
    finally:
        await r.close()


async def test_deadline_mid_stream_ends_the_stream(standins):
    server, url = standins[0]
    server.script = lambda body: Script(ids=IDS, hold_after=2)
    r = router([url], RoutingPolicy(request_timeout_s=0.3, health_interval_s=60))
    got: list[int] = []
    try:
        with pytest.raises(BackendError) as info:
            async for chunk in r.generate(request("slow")):
                got += chunk.output_ids
        assert got == IDS[:2] and info.value.status == 504
    finally:
        await r.close()


async def test_a_stream_gone_silent_is_a_failure_of_its_replica(standins):
    server, url = standins[0]
    server.script = lambda body: Script(ids=IDS, hold_after=2)
    r = router([url], RoutingPolicy(stall_timeout_s=0.3, failure_threshold=1, health_interval_s=60))
    got: list[int] = []
    try:
        with pytest.raises(BackendError) as info:
            async for chunk in r.generate(request("hung")):
                got += chunk.output_ids
        assert got == IDS[:2] and (info.value.status, info.value.code) == (502, "backend_stalled")
        assert await asyncio.to_thread(server.aborted["hung"].wait, 30)
        assert not r.replicas[0].breaker.available()
    finally:
        await r.close()


async def test_a_consumer_holding_a_chunk_past_the_stall_limit_is_not_cancelled(standins):
    """The stall limit bounds the backend's silence only: the one timer that keeps it cancels while the stream
    waits for the backend, never while its consumer holds a chunk (here longer than the limit)."""
    server, url = standins[0]
    server.script = lambda body: Script(ids=IDS[:3], delay=0.05)
    r = router([url], RoutingPolicy(stall_timeout_s=0.2, health_interval_s=60))
    got: list[int] = []
    try:
        async for chunk in r.generate(request("slow-reader")):
            got += chunk.output_ids
            await asyncio.sleep(0.3)
        assert got == IDS[:3] and r.replicas[0].breaker.available()
    finally:
        await r.close()


async def test_waiting_for_the_first_token_is_not_a_stall(standins):
    server, url = standins[0]
    server.script = lambda body: Script(ids=IDS, hold_after=0)  # queued on the backend, say
    r = router([url], RoutingPolicy(request_timeout_s=0.6, stall_timeout_s=0.2, health_interval_s=60))
    try:
        with pytest.raises(BackendError) as info:
            await output(r, request("queued"))
        assert info.value.code == "timeout" and r.replicas[0].breaker.available()
    finally:
        await r.close()


async def test_all_replicas_down_is_503_with_retry_after():
    r = router([dead_url(), dead_url()], RoutingPolicy(health_interval_s=3))
    try:
        with pytest.raises(BackendError) as info:  # both failed their health check: nothing is tried
            await output(r, request("a"))
        assert (info.value.status, info.value.code, info.value.retry_after) == (503, "backend_unavailable", 3)
        assert "0 tried of 2" in str(info.value)
    finally:
        await r.close()


async def test_all_replicas_overloaded_passes_the_429_on(standins):
    for server, _ in standins:
        server.script = lambda body: Script(refuse=429)
    r = router([url for _, url in standins], RoutingPolicy(health_interval_s=60))
    try:
        with pytest.raises(BackendError) as info:
            await output(r, request("a"))
        assert info.value.status == 429 and info.value.retry_after >= 1
        assert sum(len(server.bodies) for server, _ in standins) == 3
    finally:
        await r.close()


async def test_health_checks_take_a_replica_out_and_back(standins):
    (sick, sick_url), (well, well_url) = standins[:2]
    r = router([sick_url, well_url])
    try:
        assert await r.ready()
        sick.healthy = False
        await wait_for(lambda: not r.replicas[0].healthy)
        for i in range(3):
            await output(r, request(f"r{i}"))
        assert len(sick.bodies) == 0 and len(well.bodies) == 3
        well.healthy = False
        await wait_for(lambda: not r.replicas[1].healthy)
        assert not await r.ready()
        sick.healthy = True
        await wait_for(lambda: r.replicas[0].healthy)
        assert await r.ready()
    finally:
        await r.close()


async def test_a_busy_replica_that_answers_health_late_stays_in_while_it_delivers(standins):
    (one, one_url), (two, two_url) = standins[:2]
    # checks 0.5 s apart, not 0.1: a loaded host paused the backend's tokens (every 0.01 s) longer than 0.1 s
    r = router([one_url, two_url], RoutingPolicy(health_interval_s=0.5, health_timeout_s=0.05))
    try:
        assert await r.ready()
        one.health_delay = two.health_delay = 0.5  # both miss every check's deadline from now on
        one.script = two.script = lambda body: Script(ids=IDS * 100, delay=0.01)
        stream = r.generate(request("long", max_new_tokens=1000))
        chunks = 0
        async for _ in stream:  # tokens keep coming (on one replica) through several missed checks
            chunks += 1
            if chunks == 100:
                break
        await stream.aclose()
        serving = next(rep for rep in r.replicas if rep.delivered)
        silent = next(rep for rep in r.replicas if not rep.delivered)
        assert serving.healthy, "a replica delivering output was marked down for a late health answer"
        assert not silent.healthy, "a replica that delivered nothing and missed its checks stays up"
        await wait_for(lambda: not serving.healthy)  # once it stops delivering, a missed check counts again
    finally:
        await r.close()


async def test_half_open_breaker_closes_after_a_good_trial(standins):
    server, url = standins[0]
    server.script = lambda body: Script(refuse=503)
    r = router([url], RoutingPolicy(health_interval_s=60, failure_threshold=1, cooldown_s=0.5))
    try:
        with pytest.raises(BackendError):
            await output(r, request("a"))
        assert not r.replicas[0].breaker.available()
        with pytest.raises(BackendError) as info:  # the breaker is open: nothing is tried
            await output(r, request("b"))
        assert info.value.status == 503 and info.value.retry_after == 1 and len(server.bodies) == 1
        server.script = lambda body: Script(ids=IDS)
        await wait_for(r.replicas[0].breaker.available)
        assert await output(r, request("c")) == IDS
        assert r.replicas[0].breaker.state.value == "closed"
    finally:
        await r.close()


async def test_dns_follows_scale_up_and_drains_a_replica_that_leaves():
    """Two stand-ins on the same port of two loopback addresses, as pods behind a headless service."""
    answers: list[list[str]] = [["127.0.0.1"]]

    async def resolve(host: str, port: int) -> list[str]:
        assert (host, port) == ("sglang.test.svc", port)
        return answers[-1]

    a, b = SGLangStandIn(incremental=True), SGLangStandIn(incremental=True)
    a.script = b.script = lambda body: Script(ids=IDS)
    with serve(a.app) as a_url:
        port = int(a_url.rsplit(":", 1)[1])
        with serve(b.app, host="127.0.0.2", port=port):
            dns = DNSService("sglang.test.svc", port, refresh_s=0.1)
            r = Router(lambda url: SGLangBackend(url, incremental=True), dns=dns, policy=FAST, resolve=resolve)
            try:
                assert await output(r, request("one")) == IDS
                assert [rep.url for rep in r.replicas] == [a_url]
                answers.append(["127.0.0.1", "127.0.0.2"])
                await wait_for(lambda: len(r.replicas) == 2)
                a.script = lambda body: Script(ids=IDS, hold_after=2)
                held = r.generate(request("held"))
                async with aclosing(held):
                    first = await anext(held)
                    answers.append(["127.0.0.2"])  # a's pod goes away while it streams
                    await wait_for(lambda: r.replicas[0].draining)
                    assert await output(r, request("new")) == IDS
                    assert len(b.bodies) == 1  # new work went to b
                    assert [rep.url for rep in r.replicas] == [a_url, f"http://127.0.0.2:{port}"]
                assert first.output_ids == IDS[: len(first.output_ids)] != []  # events that arrive together join
                await wait_for(lambda: len(r.replicas) == 1)  # a retired once its stream ended
                assert r.replicas[0].url == f"http://127.0.0.2:{port}"
            finally:
                await r.close()


async def test_a_failed_lookup_keeps_the_replicas(standins):
    _, url = standins[0]
    port = int(url.rsplit(":", 1)[1])
    calls = 0

    async def resolve(host: str, port: int) -> list[str]:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise socket.gaierror("temporary failure in name resolution")
        return ["127.0.0.1"]

    r = Router(
        lambda u: SGLangBackend(u, incremental=True),
        dns=DNSService("x", port, refresh_s=0.05),
        policy=FAST,
        resolve=resolve,
    )
    try:
        assert await output(r, request("a")) == IDS
        await wait_for(lambda: calls >= 3)
        assert await output(r, request("b")) == IDS
    finally:
        await r.close()


async def test_close_leaves_no_tasks(standins):
    r = router([url for _, url in standins])
    before = asyncio.all_tasks()
    await output(r, request("a"))
    await r.close()
    # httpx leaves its inner stream generators to the loop's finalizer, which runs them out at once
    await wait_for(lambda: not asyncio.all_tasks() - before - {asyncio.current_task()}, timeout=5)


async def wait_for(condition, timeout: float = 30.0) -> None:
    """Poll `condition` until it holds (a bound for an event that must happen, not a speed check)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        assert loop.time() < end, "condition never held"
        await asyncio.sleep(0.02)
