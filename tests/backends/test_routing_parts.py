"""The routing parts on their own: circuit breaker (with a controlled clock), prefix affinity, DNS names."""

from __future__ import annotations

import pytest

from backends.circuit_breaker import BreakerState, CircuitBreaker
from backends.discovery import DNSService
from backends.prefix_affinity import PrefixAffinity


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_breaker_opens_after_threshold_failures_in_a_row():
    clock = Clock()
    b = CircuitBreaker(threshold=3, cooldown_s=2, clock=clock)
    b.failed()
    b.failed()
    b.succeeded()  # a success resets the count
    b.failed()
    b.failed()
    assert b.available()
    b.failed()
    assert b.state is BreakerState.OPEN and not b.available()
    assert b.retry_in() == 2
    clock.now += 1.5
    assert b.retry_in() == pytest.approx(0.5)


def test_half_open_lets_one_trial_through():
    clock = Clock()
    b = CircuitBreaker(threshold=1, cooldown_s=2, clock=clock)
    b.failed()
    clock.now += 2
    assert b.available()
    b.acquire()
    assert b.state is BreakerState.HALF_OPEN and not b.available()  # the trial is out
    b.succeeded()
    assert b.state is BreakerState.CLOSED and b.available()


def test_failed_trial_reopens_with_a_doubled_cooldown_up_to_the_cap():
    clock = Clock()
    b = CircuitBreaker(threshold=1, cooldown_s=2, max_cooldown_s=5, clock=clock)
    b.failed()
    waits = []
    for _ in range(3):
        clock.now += b.retry_in()
        b.acquire()
        b.failed()
        waits.append(b.retry_in())
    assert waits == [4, 5, 5]
    clock.now += 5
    b.acquire()
    b.succeeded()
    b.failed()
    assert b.retry_in() == 2  # closing resets the cooldown


def test_a_trial_without_verdict_frees_the_slot():
    clock = Clock()
    b = CircuitBreaker(threshold=1, cooldown_s=1, clock=clock)
    b.failed()
    clock.now += 1
    b.acquire()
    assert not b.available()
    b.released()
    assert b.available() and b.state is BreakerState.HALF_OPEN


def test_affinity_finds_the_longest_known_prefix():
    a: PrefixAffinity[str] = PrefixAffinity(block_tokens=4, min_tokens=8)
    short = a.prefix_hashes(list(range(7)))
    assert short == []  # under min_tokens: no affinity at all
    base = list(range(100))
    a.record(a.prefix_hashes(base[:16]), "x")
    a.record(a.prefix_hashes(base[:12] + [999] * 8), "y")
    assert a.candidates(a.prefix_hashes(base[:20])) == ["x", "y"]  # x holds 16 shared tokens, y 12
    assert a.candidates(a.prefix_hashes(base[:12] + [999] * 4)) == ["y"]  # the shared blocks are y's now
    assert a.candidates(a.prefix_hashes([7] * 16)) == []
    # a prefix shorter than min_tokens never counts, even if known
    a.record(a.prefix_hashes([5] * 4 + [6] * 12), "z")
    assert a.candidates(a.prefix_hashes([5] * 4 + [0] * 12)) == []


def test_affinity_is_bounded_and_forgets_replicas():
    a: PrefixAffinity[str] = PrefixAffinity(block_tokens=2, min_tokens=2, capacity=10)
    for i in range(20):
        a.record(a.prefix_hashes([i, i, i, i]), f"r{i % 3}")
    assert len(a._owner) == 10
    a.forget("r1")
    assert "r1" not in a._owner.values()
    assert a.candidates(a.prefix_hashes([18, 18])) == ["r0"]
    assert a.candidates(a.prefix_hashes([19, 19])) == []  # r1's


@pytest.mark.anyio
async def test_dns_service_urls():
    async def resolve(host: str, port: int) -> list[str]:
        return ["10.0.0.7", "fd00::1"]

    async def broken(host: str, port: int) -> list[str]:
        raise OSError("no answer")

    service = DNSService("svc", 30000)
    assert await service.urls(resolve) == ["http://10.0.0.7:30000", "http://[fd00::1]:30000"]
    assert await service.urls(broken) is None


@pytest.mark.anyio
async def test_dns_service_resolves_a_real_name():
    assert await DNSService("localhost", 8080).urls() in (
        ["http://127.0.0.1:8080"],
        ["http://127.0.0.1:8080", "http://[::1]:8080"],
        ["http://[::1]:8080", "http://127.0.0.1:8080"],
    )
