"""The limiter engine against both stores (in memory, and a real redis-server), on a clock the tests move."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from policies.limits import Limits, MemoryLimiter, RedisLimiter
from policies.limits.headers import duration
from policies.limits.model import CLEAN_PER_CALL, FREE_JOINS, RETRY_SCAN

pytestmark = pytest.mark.anyio

T0 = 20_834 * 86_400.0 + 3600  # 01:00 UTC on 2027-01-16: far from midnight


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture(params=["memory", "redis"])
async def limiter(request, clock):
    if request.param == "memory":
        made = MemoryLimiter(clock=clock)
    else:
        # exactness is checked here, not the store's deadline: 50 fresh connections at once can take longer
        # than the default 0.5 s on a loaded machine (a 503 where 429 was expected, once in a suite run)
        made = RedisLimiter(request.getfixturevalue("redis_server").url, clock=clock, timeout_s=5.0)
    yield made
    await made.close()


@pytest.fixture
def tenant():
    return f"t-{uuid.uuid4().hex[:8]}"


def charge() -> str:
    return uuid.uuid4().hex


async def test_50_parallel_admits_against_20_per_minute_admit_exactly_20(limiter, tenant):
    limits = Limits(requests_per_minute=20)
    answers = await asyncio.gather(*(limiter.admit(tenant, limits, charge(), 10) for _ in range(50)))
    assert sum(a.allowed for a in answers) == 20
    refused = [a for a in answers if not a.allowed]
    assert {(a.limit, a.status, a.retry_after_s) for a in refused} == {("requests_per_minute", 429, 60.0)}
    assert all(a.headers["x-ratelimit-remaining-requests"] == "0" for a in refused)


async def test_the_window_slides_and_retry_after_is_exact(limiter, tenant, clock):
    limits = Limits(requests_per_minute=3)
    for _ in range(3):
        assert (await limiter.admit(tenant, limits, charge(), 1)).allowed
        clock.now += 10  # admitted at +0, +10, +20
    clock.now = T0 + 45
    refused = await limiter.admit(tenant, limits, charge(), 1)
    assert (refused.allowed, refused.retry_after_s) == (False, 15.0)  # the first admission leaves at +60
    assert refused.headers["retry-after"] == "15" and refused.headers["retry-after-ms"] == "15000"
    clock.now = T0 + 59.999
    assert not (await limiter.admit(tenant, limits, charge(), 1)).allowed
    clock.now = T0 + 60
    assert (await limiter.admit(tenant, limits, charge(), 1)).allowed
    # No fixed-window doubling: 3 admitted in [+10, +60] and a new minute changes nothing.
    clock.now = T0 + 61
    assert (await limiter.admit(tenant, limits, charge(), 1)).retry_after_s == 9.0


async def test_a_retry_that_needs_more_than_the_oldest_entries_read_is_timed_by_the_sums(limiter, tenant, clock):
    """A refusal reads at most the window's oldest RETRY_SCAN entries to time its retry (a refused request must not
    read a window of 100,000 entries: in Redis that held every tenant's calls for 0.4 s); a retry that needs more of
    them to leave is read by the sums of the window's seconds and milliseconds: exact too (it was when the newest
    leaves, an upper bound: 41 s here)."""
    limits = Limits(tokens_per_minute=RETRY_SCAN + 200)
    batches = [RETRY_SCAN // 10] * 10 + [50, 50]  # one token each; a batch a second (admitted at once)
    for second, size in enumerate(batches):
        clock.now = T0 + second
        admitted = await asyncio.gather(*(limiter.admit(tenant, limits, charge(), 1) for _ in range(size)))
        assert all(a.allowed for a in admitted)
    clock.now = T0 + 30
    within = await limiter.admit(tenant, limits, charge(), 200)  # the oldest 100 (second 0) leaving make room
    assert (within.limit, within.retry_after_s) == ("tokens_per_minute", 30.0)
    beyond = await limiter.admit(tenant, limits, charge(), RETRY_SCAN + 150)  # the oldest 1,050 (to second 10)
    assert (beyond.limit, beyond.retry_after_s) == ("tokens_per_minute", 40.0)  # when second 10's leave


async def test_settled_tokens_replace_the_reservation(limiter, tenant, clock):
    limits = Limits(tokens_per_minute=1000)
    first = await limiter.admit(tenant, limits, charge(), 600)
    assert first.allowed and first.headers["x-ratelimit-remaining-tokens"] == "400"
    clock.now += 5
    second_charge = charge()
    refused = await limiter.admit(tenant, limits, second_charge, 600)
    assert (refused.limit, refused.retry_after_s) == ("tokens_per_minute", 55.0)
    assert refused.headers["x-ratelimit-remaining-tokens"] == "400"  # a refusal reserves nothing
    await limiter.settle(first, 100)  # a short answer frees 500 tokens at once
    second = await limiter.admit(tenant, limits, second_charge, 600)
    assert second.allowed and second.headers["x-ratelimit-remaining-tokens"] == "300"
    await limiter.settle(second, 900)  # more than reserved: charged as used
    clock.now += 1
    refused = await limiter.admit(tenant, limits, charge(), 100)
    assert (refused.limit, refused.retry_after_s) == ("tokens_per_minute", 54.0)  # the first 100 leave at +60
    refused = await limiter.admit(tenant, limits, charge(), 101)
    assert (refused.limit, refused.retry_after_s) == ("tokens_per_minute", 59.0)  # 101 needs the 900 gone too


async def test_a_request_over_the_limit_alone_never_fits(limiter, tenant):
    refused = await limiter.admit(tenant, Limits(tokens_per_minute=100, tokens_per_day=1000), charge(), 101)
    assert (refused.allowed, refused.limit, refused.retry_after_s) == (False, "tokens_per_minute", None)
    assert "retry-after" not in refused.headers
    refused = await limiter.admit(tenant, Limits(tokens_per_day=100), charge(), 101)
    assert (refused.limit, refused.retry_after_s) == ("tokens_per_day", None)


async def test_a_charge_id_is_charged_once_but_each_join_holds_a_slot(limiter, tenant):
    """A retry joins its charge (one request; every admit's usage settled), but runs too: each join holds a concurrency
    slot and a token reservation of its own, so requests sent under one id never run past concurrent_requests."""
    limits = Limits(requests_per_minute=5, tokens_per_minute=1000, concurrent_requests=2)
    charge_id = charge()
    first = await limiter.admit(tenant, limits, charge_id, 300)
    retry = await limiter.admit(tenant, limits, charge_id, 300)  # the same request, retried on another replica
    assert first.allowed and retry.allowed and first.holder != retry.holder
    assert retry.headers["x-ratelimit-remaining-requests"] == "4"
    assert retry.headers["x-ratelimit-remaining-tokens"] == "400"
    third = await limiter.admit(tenant, limits, charge_id, 300)  # two run: a third would be one too many
    assert (third.allowed, third.limit, third.holder, third.retry_after_s) == (False, "concurrent_requests", "", 1.0)
    await limiter.settle(first, 50)
    await limiter.settle(first, 50)  # idempotent
    other = await limiter.admit(tenant, limits, charge(), 1)  # the first's slot is free, the retry holds the other
    assert other.allowed and not (await limiter.admit(tenant, limits, charge(), 1)).allowed
    await limiter.settle(other, 1)
    await limiter.settle(retry, 20)  # the retry's real usage adds to the charge
    probe = await limiter.admit(tenant, limits, charge(), 0)
    assert probe.allowed and probe.headers["x-ratelimit-remaining-tokens"] == "929"
    assert probe.headers["x-ratelimit-remaining-requests"] == "2"


@pytest.mark.parametrize(
    ("token_limit", "retry_after_s"),
    [(Limits(tokens_per_minute=1000), 60.0), (Limits(tokens_per_day=1000), 23 * 3600.0)],
    ids=["per_minute", "per_day"],
)
async def test_requests_sent_at_once_under_one_id_do_not_pass_a_token_limit(
    limiter, tenant, token_limit, retry_after_s
):
    """20 slow streams under one x-request-id (a request limit that would admit them all): each join reserves its own
    tokens, so the token limit admits 10 of 100 tokens, as it would 10 requests."""
    limits = Limits(
        requests_per_minute=20,
        tokens_per_minute=token_limit.tokens_per_minute,
        tokens_per_day=token_limit.tokens_per_day,
    )
    answers = await asyncio.gather(*(limiter.admit(tenant, limits, "same-id", 100) for _ in range(20)))
    assert sum(a.allowed for a in answers) == 10
    refused = [a for a in answers if not a.allowed]
    assert {(a.limit, a.status, a.retry_after_s, a.holder) for a in refused} == {
        (
            next(name for name in ("tokens_per_minute", "tokens_per_day") if getattr(limits, name)),
            429,
            retry_after_s,
            "",
        )
    }
    assert {a.headers["x-ratelimit-remaining-requests"] for a in refused} == {str(20 - 10 + FREE_JOINS)}
    for admission in answers:
        await limiter.settle(admission, 10)  # each settles its own usage: 10 admissions x 10 tokens
    probe = await limiter.admit(tenant, limits, charge(), 900)
    assert probe.allowed and probe.headers["x-ratelimit-remaining-requests"] == str(20 - 10 + FREE_JOINS - 1)


async def test_past_the_retries_a_client_makes_a_join_counts_as_a_request(limiter, tenant):
    """With requests_per_minute alone, streams under one id: the first and FREE_JOINS retries are one request; each
    further join is a request of its own (given back when it served nothing), so 20 at once stop at the limit."""
    limits = Limits(requests_per_minute=5)
    retries = [await limiter.admit(tenant, limits, "same-id", 1) for _ in range(1 + FREE_JOINS)]
    assert {(a.allowed, a.headers["x-ratelimit-remaining-requests"]) for a in retries} == {(True, "4")}
    counted = await limiter.admit(tenant, limits, "same-id", 1)
    assert counted.allowed and counted.headers["x-ratelimit-remaining-requests"] == "3"
    await cancelled_admit(limiter, tenant, limits, "same-id", 1)  # a counted join that served nothing: taken back
    answers = await asyncio.gather(*(limiter.admit(tenant, limits, "same-id", 1) for _ in range(20)))
    assert sum(a.allowed for a in answers) == 3
    refused = [a for a in answers if not a.allowed]
    assert {(a.limit, a.status, a.retry_after_s) for a in refused} == {("requests_per_minute", 429, 60.0)}
    assert all(a.headers["x-ratelimit-remaining-requests"] == "0" for a in refused)
    for admission in [*retries, counted, *answers]:
        await limiter.settle(admission, 1)  # settled, each join stays the request it served
    assert not (await limiter.admit(tenant, limits, charge(), 1)).allowed


async def test_a_joins_void_gives_back_its_own_tokens_only(limiter, tenant):
    limits = Limits(requests_per_minute=5, tokens_per_minute=1000, tokens_per_day=1000)
    first = await limiter.admit(tenant, limits, "shared", 300)
    await cancelled_admit(limiter, tenant, limits, "shared", 200)  # a retry that joined, then left: void
    joined = await limiter.admit(tenant, limits, "shared", 200)
    assert joined.allowed and joined.headers["x-ratelimit-remaining-tokens"] == "500"  # 300 + 200, not 300 + 400
    refused = await limiter.admit(tenant, limits, "shared", 501)  # a join past the day's quota (and the minute's)
    assert (refused.limit, refused.retry_after_s) == ("tokens_per_day", 23 * 3600.0)
    await limiter.settle(first, 40)  # the first's reservation becomes its usage; the join's stays reserved
    probe = await limiter.admit(tenant, limits, charge(), 0)
    assert probe.headers["x-ratelimit-remaining-tokens"] == "760"
    await limiter.settle(joined, 25)  # both ran: both usages are charged, nothing twice
    probe = await limiter.admit(tenant, limits, charge(), 935)
    assert probe.allowed and probe.headers["x-ratelimit-remaining-tokens"] == "0"
    assert probe.headers["x-ratelimit-remaining-requests"] == "2"  # the shared request, the two probes


async def test_concurrency_slots_are_released_on_settle(limiter, tenant):
    limits = Limits(concurrent_requests=2)
    held = [await limiter.admit(tenant, limits, charge(), 1) for _ in range(2)]
    assert all(a.allowed for a in held)
    refused = await limiter.admit(tenant, limits, charge(), 1)
    assert (refused.limit, refused.retry_after_s) == ("concurrent_requests", 1.0)
    await limiter.settle(held[0], 1)
    assert (await limiter.admit(tenant, limits, charge(), 1)).allowed
    assert not (await limiter.admit(tenant, limits, charge(), 1)).allowed


async def test_the_daily_quota_is_a_utc_day(limiter, tenant, clock):
    limits = Limits(tokens_per_day=1000)
    first = await limiter.admit(tenant, limits, charge(), 900)
    await limiter.settle(first, 800)
    clock.now += 3600  # 02:00 UTC: the per-minute window is empty, the day is not
    refused = await limiter.admit(tenant, limits, charge(), 201)
    assert (refused.limit, refused.retry_after_s) == ("tokens_per_day", 22 * 3600.0)
    assert (await limiter.admit(tenant, limits, charge(), 200)).allowed
    clock.now += 22 * 3600  # midnight UTC
    assert (await limiter.admit(tenant, limits, charge(), 1000)).allowed


async def test_the_longest_refusal_is_reported(limiter, tenant, clock):
    limits = Limits(requests_per_minute=1, tokens_per_day=10)
    await limiter.admit(tenant, limits, charge(), 10)
    refused = await limiter.admit(tenant, limits, charge(), 1)
    assert refused.limit == "tokens_per_day"  # the minute frees in 60 s, the day in 23 h


async def test_settle_survives_the_cancellation_of_its_caller(limiter, tenant):
    limits = Limits(concurrent_requests=1, tokens_per_minute=1000)
    started = asyncio.Event()

    async def request() -> None:
        admission = await limiter.admit(tenant, limits, charge(), 500)
        try:
            started.set()
            await asyncio.Event().wait()  # streaming, until the client disconnects
        finally:
            await limiter.settle(admission, 120)

    task = asyncio.create_task(request())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    probe = await limiter.admit(tenant, limits, charge(), 0)
    assert probe.allowed and probe.headers["x-ratelimit-remaining-tokens"] == "880"


async def cancelled_admit(limiter, tenant: str, limits: Limits, charge_id: str, tokens: int) -> None:
    """An admit whose caller leaves while the store answers."""
    admitting = asyncio.create_task(limiter.admit(tenant, limits, charge_id, tokens))
    await asyncio.sleep(0)  # under way
    admitting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await admitting
    await limiter.settled()


async def test_an_admit_whose_caller_left_leaves_no_trace(limiter, tenant):
    limits = Limits(requests_per_minute=10, concurrent_requests=1, tokens_per_minute=1000, tokens_per_day=500)
    await cancelled_admit(limiter, tenant, limits, charge(), 500)
    probe = await limiter.admit(tenant, limits, charge(), 500)  # the day's 500 tokens and the slot are free again
    assert probe.allowed and probe.headers["x-ratelimit-remaining-requests"] == "9"
    assert probe.headers["x-ratelimit-remaining-tokens"] == "500"


async def test_a_joined_admit_whose_caller_left_keeps_the_charge(limiter, tenant):
    limits = Limits(requests_per_minute=10, concurrent_requests=1)
    first = await limiter.admit(tenant, limits, "shared", 5)
    await cancelled_admit(limiter, tenant, limits, "shared", 5)  # a retry that joined the charge, then left
    assert not (await limiter.admit(tenant, limits, charge(), 0)).allowed  # the first still holds the slot
    await limiter.settle(first, 5)
    probe = await limiter.admit(tenant, limits, charge(), 0)
    assert probe.allowed and probe.headers["x-ratelimit-remaining-requests"] == "8"  # the first and the probe


async def test_a_settle_cancelled_midway_still_lands(limiter, tenant):
    limits = Limits(concurrent_requests=1)
    admission = await limiter.admit(tenant, limits, charge(), 5)
    settling = asyncio.create_task(limiter.settle(admission, 5))
    await asyncio.sleep(0)
    settling.cancel()
    await limiter.close()  # waits for settlements in flight
    assert (await limiter.admit(tenant, limits, charge(), 5)).allowed


async def test_headers_name_only_the_limits_a_tenant_has(limiter, tenant):
    allowed = await limiter.admit(tenant, Limits(requests_per_minute=10), charge(), 5)
    assert allowed.headers == {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "9",
        "x-ratelimit-reset-requests": "1m0s",
    }
    assert (await limiter.admit(tenant, Limits(), charge(), 5)).headers == {}


def test_durations_are_written_as_openai_writes_them():
    assert [duration(ms) for ms in (0, 17, 999, 1000, 1500, 59_999, 360_000, 61_250, 3_600_000)] == [
        "0s",
        "17ms",
        "999ms",
        "1s",
        "1.5s",
        "59.999s",
        "6m0s",
        "1m1.25s",
        "1h0m0s",
    ]


async def test_hostile_token_counts_are_bounded(limiter, tenant):
    admitted = await limiter.admit(tenant, Limits(concurrent_requests=5), charge(), 10**30)
    assert admitted.allowed and limiter.store_healthy
    await limiter.settle(admitted, 10**40)
    refused = await limiter.admit(tenant, Limits(tokens_per_minute=10**6), charge(), 10**30)
    assert (refused.limit, refused.retry_after_s) == ("tokens_per_minute", None) and limiter.store_errors == 0


@pytest.mark.parametrize(
    "fields",
    [
        {"requests_per_minute": -1},
        {"tokens_per_minute": 1.5},
        {"concurrent_requests": True},
        {"tokens_per_day": "10"},
        {"on_store_error": "maybe"},
    ],
)
def test_limits_refuse_nonsense(fields):
    with pytest.raises(ValueError, match=next(iter(fields))):
        Limits(**fields)


async def test_after_a_burst_a_memory_call_takes_a_bounded_slice_of_it_out_and_counts_stay_exact(tenant, clock):
    """The in-memory store freed every aged-out entry of a window in the call that found them: one admit 70 s after
    100,000 admissions took ~50 ms of the event loop's CPU, stalling every request. A call now takes CLEAN_PER_CALL of
    them out at most; the counts lose what left by the sums of its milliseconds and seconds, so they stay exact, the
    refusals' retries skip what is left of the aged-out entries, and the sums hold only what is in the window."""
    limiter = MemoryLimiter(clock=clock)
    limits = Limits(requests_per_minute=10_000, tokens_per_minute=10**6)

    async def one(i: int) -> None:  # reserves 7, uses 5; two of every 50 served nothing (taken back)
        await limiter.settle(await limiter.admit(tenant, limits, f"b{i}", 7), 5, void=i % 25 == 0)

    for group in range(12):  # 50 admissions every 10 ms
        clock.now = T0 + group / 100
        await asyncio.gather(*(one(group * 50 + i) for i in range(50)))
    clock.now = T0 + 30
    await limiter.admit(tenant, limits, "kept", 11)  # still in the window when the burst has left it
    state = limiter._tenants[tenant]
    entries = [12 * 48 - CLEAN_PER_CALL + 2, 12 * 48 - 3 * CLEAN_PER_CALL + 3]  # the voided left; one call refuses
    for call, (at, left_in_burst) in enumerate([(60.105, 48), (60.3, 0)], start=1):
        clock.now = T0 + at  # first the 11 groups up to 100 ms leave (528 admissions), then the last one
        admission = await limiter.admit(tenant, limits, f"after{call}", 3)
        assert admission.headers["x-ratelimit-remaining-requests"] == str(10_000 - left_in_burst - 1 - call)
        assert admission.headers["x-ratelimit-remaining-tokens"] == str(10**6 - 5 * left_in_burst - 11 - 3 * call)
        assert len(state.log) == entries[call - 1]
        if (
            call == 1
        ):  # 20 tokens over: the last group's oldest 4 must leave, the 476 aged-out ones before them free none
            tight = Limits(tokens_per_minute=5 * 48 + 11 + 3)
            refused = await limiter.admit(tenant, tight, "over", 20)
            assert (refused.limit, refused.retry_after_s) == ("tokens_per_minute", 0.005)
    assert sorted(state.second_sums) == [int(T0), int(T0) + 30, int(T0) + 60]  # the burst's leaves when it is whole
    clock.now += 61  # all of it left: the counts and sums go at once, its entries aside (a slice a call)
    assert (await limiter.admit(tenant, limits, "alone", 3)).headers["x-ratelimit-remaining-requests"] == "9999"
    assert len(state.log) == len(state.ms_sums) == 1
    assert [len(log) for log in state.aged] == [entries[-1] - CLEAN_PER_CALL]


async def test_a_models_own_limit_refuses_while_the_tenants_admits_and_says_it_is_the_models(limiter, tenant, clock):
    own = Limits(requests_per_minute=2, tokens_per_minute=100)
    tenant_wide = Limits(requests_per_minute=10)
    for _ in range(2):
        assert (await limiter.admit(tenant, tenant_wide, charge(), 10, model="big", model_limits=own)).allowed
    clock.now += 10
    refused = await limiter.admit(tenant, tenant_wide, charge(), 10, model="big", model_limits=own)
    assert (refused.allowed, refused.limit, refused.scope, refused.model) == (
        False,
        "requests_per_minute",
        "model",
        "big",
    )
    assert refused.retry_after_s == 50.0 and refused.headers["retry-after"] == "50"
    assert (
        refused.headers["x-ratelimit-limit-requests"] == "2"
        and refused.headers["x-ratelimit-remaining-requests"] == "0"
    )
    assert refused.headers["x-ratelimit-remaining-tokens"] == "80"  # the model's tokens (the tenant has no such limit)
    other = await limiter.admit(tenant, tenant_wide, charge(), 10, model="small")  # a model without limits of its own
    assert (
        other.allowed and other.headers["x-ratelimit-remaining-requests"] == "7"
    )  # the tenant's, the refusal not counted
    assert "x-ratelimit-limit-tokens" not in other.headers


async def test_a_retry_under_the_same_id_for_another_model_is_a_request_of_that_models_window(limiter, tenant):
    """A join (the same x-request-id, its charge still open) for another model than its first admit's: the tenant's
    window counts it as the same request (FREE_JOINS), but the model's own window never counted the first, so there it
    is a request of its own: `limits.models` requests_per_minute is never passed through joins (it was: every open
    request lent FREE_JOINS uncounted requests to any model). A join for the first admit's model stays free in both."""
    one = Limits(requests_per_minute=1)
    tenant_wide = Limits(requests_per_minute=10)
    first = await limiter.admit(tenant, tenant_wide, "r1", 5, model="other")  # no limits of its own; still open
    join = await limiter.admit(tenant, tenant_wide, "r1", 5, model="llama", model_limits=one)
    assert join.allowed and join.headers["x-ratelimit-remaining-requests"] == "0"  # llama's window: 1 request
    again = await limiter.admit(tenant, tenant_wide, "r1", 5, model="llama", model_limits=one)
    assert (again.allowed, again.limit, again.scope) == (False, "requests_per_minute", "model")
    fresh = await limiter.admit(tenant, tenant_wide, charge(), 5, model="llama", model_limits=one)
    assert (fresh.allowed, fresh.scope) == (False, "model")
    probe = await limiter.admit(tenant, tenant_wide, charge(), 5, model="other")
    assert probe.headers["x-ratelimit-remaining-requests"] == "8"  # the tenant's: r1 (its join free) and the probe
    window = await limiter.settle(join, 0, void=True)  # the join served nothing: taken back from llama's window
    assert window.model[:2] == (0, 0) and window[:2] == (2, 10)
    own = await limiter.admit(tenant, tenant_wide, "r2", 5, model="llama", model_limits=one)
    retry = await limiter.admit(tenant, tenant_wide, "r2", 5, model="llama", model_limits=one)
    assert own.allowed and retry.allowed  # a retry for the same model: the same request in both windows
    assert retry.headers["x-ratelimit-remaining-requests"] == "0"
    for admission in (first, probe, own, retry):
        await limiter.settle(admission, 5)


async def test_the_tenants_own_limits_hold_over_all_its_models(limiter, tenant):
    tenant_wide = Limits(requests_per_minute=3)
    own = Limits(requests_per_minute=5, tokens_per_minute=100)
    for model in ("a", "a", "b"):
        assert (await limiter.admit(tenant, tenant_wide, charge(), 10, model=model, model_limits=own)).allowed
    refused = await limiter.admit(tenant, tenant_wide, charge(), 10, model="a", model_limits=own)
    assert (refused.allowed, refused.limit, refused.scope) == (False, "requests_per_minute", "tenant")
    assert (
        refused.headers["x-ratelimit-limit-requests"] == "3"
    )  # the limit that refused, though the model has more left
    assert refused.headers["x-ratelimit-remaining-tokens"] == "80"  # model a's window: the refusal reserved nothing


async def test_a_settle_and_a_void_reach_the_models_window_as_the_tenants(limiter, tenant):
    own = Limits(tokens_per_minute=100, concurrent_requests=1)
    first = await limiter.admit(tenant, Limits(), charge(), 60, model="m", model_limits=own)
    busy = await limiter.admit(tenant, Limits(), charge(), 1, model="m", model_limits=own)
    assert (busy.limit, busy.scope, busy.retry_after_s) == ("concurrent_requests", "model", 1.0)
    window = await limiter.settle(first, 20)  # the reservation becomes its usage in both windows; the slot is free
    assert (window.tokens, window.model.tokens, window.model.requests) == (20, 20, 1)
    second = await limiter.admit(tenant, Limits(), charge(), 80, model="m", model_limits=own)
    assert second.allowed and second.headers["x-ratelimit-remaining-tokens"] == "0"
    window = await limiter.settle(second, 0, void=True)  # it served nothing: taken back from both
    assert window.model[:2] == (1, 20) and window[:2] == (1, 20)
    fitted = await limiter.admit(
        tenant, Limits(tokens_per_minute=1000), charge(), 500, least=5, model="m", model_limits=own
    )
    assert fitted.reserved == 80  # what the model's window leaves, under what the tenant's does


async def test_a_changed_model_limit_applies_at_once_and_requests_in_flight_still_settle(limiter, tenant):
    """Hot reload: the counts are the model's, whatever its limits say now; an admission made under the old limits
    (or before its model had any) settles in the windows it was admitted in."""
    two = Limits(requests_per_minute=2, concurrent_requests=1)
    in_flight = await limiter.admit(tenant, Limits(), charge(), 5, model="m", model_limits=two)
    assert not (await limiter.admit(tenant, Limits(), charge(), 5, model="m", model_limits=two)).allowed
    three = Limits(requests_per_minute=3, concurrent_requests=2)  # the file was edited
    assert (await limiter.admit(tenant, Limits(), charge(), 5, model="m", model_limits=three)).allowed
    refused = await limiter.admit(tenant, Limits(), charge(), 5, model="m", model_limits=three)
    assert (refused.limit, refused.scope) == ("concurrent_requests", "model")
    unlimited = await limiter.admit(tenant, Limits(), charge(), 5, model="m")  # its limits were removed
    assert unlimited.allowed and unlimited.model == ""
    await limiter.settle(in_flight, 5)  # admitted under the first version: frees its slot in the model's window
    again = await limiter.admit(tenant, Limits(), charge(), 5, model="m", model_limits=Limits(concurrent_requests=2))
    assert again.allowed
    await limiter.settle(unlimited, 5)
