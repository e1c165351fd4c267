"""The admission step's rules on their own: tools.strict rewrites every tool's strict flag, tools.allow
names the first tool outside it, caps and defaults of max tokens, a fair queue's refusal counted nowhere; and the step
is inert without policies."""

from __future__ import annotations

import datetime as dt
import math
import time
import uuid
from types import SimpleNamespace

import pytest

from backends.base import BackendError, SamplingParams
from gateway.api.admission import RequestPolicy
from gateway.api.tenancy import PolicyGate, TenantRequest
from gateway.errors import APIError, anthropic_error, from_backend
from gateway.types import ChatRequest, ChoiceStep
from policies.auth import Caller
from policies.limits import FairQueue, MemoryLimiter, RedisLimiter
from policies.limits import Limits as LimiterLimits
from policies.policy import Globs, Key, Limits, ModelLimits, Policy
from policies.store import PolicyStore


def policy_with(**fields) -> RequestPolicy:
    policy = Policy(tenant="t", keys=(Key("k", "0" * 64),), models=Globs(("*",)), **fields)
    return RequestPolicy(TenantRequest(Caller(policy, policy.keys[0]), "rid"), None)


def chat_with(*tools: tuple[str, bool | None]) -> ChatRequest:
    specs = []
    for name, strict in tools:
        function = {"name": name, "parameters": {"type": "object", "properties": {}}}
        if strict is not None:
            function["strict"] = strict
        specs.append({"type": "function", "function": function})
    return ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=specs)


def strict_flags(chat: ChatRequest) -> list:
    return [t["function"].get("strict") for t in chat.tools]


@pytest.mark.parametrize(
    ("mode", "expected"), [("client", [True, False, None]), ("always", [True] * 3), ("never", [False] * 3)]
)
def test_tools_strict(mode, expected):
    chat = chat_with(("a", True), ("b", False), ("c", None))
    assert strict_flags(policy_with(tools_strict=mode).check_tools(chat)) == expected
    assert strict_flags(chat) == [True, False, None]  # the request itself is left as it was


def test_tools_allow_names_the_first_tool_outside_it():
    rules = policy_with(tools_allow=Globs(("get_*", "search")))
    assert rules.check_tools(chat_with(("get_weather", None), ("search", None))).tools
    with pytest.raises(APIError) as caught:
        rules.check_tools(chat_with(("get_weather", None), ("search", None), ("rm_rf", None), ("x", None)))
    error = caught.value
    assert (error.status, error.param, error.code) == (403, "tools[2].function.name", "tool_not_allowed")


def test_max_tokens_ceiling_and_default():
    rules = policy_with(limits=Limits(max_tokens=100))
    rules.check_max_tokens(100, "max_tokens")
    rules.check_max_tokens(None, "max_tokens")
    with pytest.raises(APIError) as caught:
        rules.check_max_tokens(101, "max_completion_tokens")
    assert (caught.value.status, caught.value.param) == (400, "max_completion_tokens")
    assert (rules.cap(5000), rules.cap(7)) == (100, 7)


def test_a_default_max_tokens_fits_the_tenants_token_limits():
    """No max tokens asked: the default is what the token limits leave after the prompt, shared by the choices (a
    context-sized default was a 400 for every such request of a tenant whose tokens_per_minute is below the context);
    one asked for is checked against the limits as it is (admission's 400 names it)."""
    rules = policy_with(limits=Limits(tokens_per_minute=1000, tokens_per_day=700))
    assert rules.cap(8000, None, 100) == 600 and rules.cap(8000, None, 100, choices=4) == 150
    assert rules.cap(8000, 8000, 100) == 8000 and rules.cap(50, None, 100) == 50
    assert rules.cap(8000, None, 1000) == 8000  # the prompt alone is over: it is what to lower
    assert policy_with(limits=Limits(tokens_per_minute=1000, max_tokens=64)).cap(8000, None, 100) == 64


def test_a_default_max_tokens_fits_the_models_token_limits_too():
    """`limits.models`: a model's own token limits bound a request's default budget as the tenant's do (admission
    fitted both, but the budget before it, which the fair queue charges and the request's record shows, was the
    tenant's alone); another model's, or a budget the client set, are not lowered."""
    per_model = ModelLimits((("llama-*", LimiterLimits(tokens_per_minute=300, tokens_per_day=2000)),))
    rules = policy_with(limits=Limits(tokens_per_minute=1000), model_limits=per_model)
    assert rules.cap(8000, None, 100, model="llama-70b") == 200
    assert rules.cap(8000, None, 100, choices=4, model="llama-70b") == 50
    assert rules.cap(8000, None, 100, model="other") == rules.cap(8000, None, 100) == 900
    assert rules.cap(8000, 8000, 100, model="llama-70b") == 8000
    assert rules.cap(8000, None, 300, model="llama-70b") == 700  # the prompt fills the model's: the tenant's bound


def test_inert_without_policies():
    rules = RequestPolicy(None, None)
    chat = chat_with(("anything", False))
    assert rules.check_tools(chat) is chat and rules.cap(5000) == 5000 and rules.queued(None, 1) is None
    rules.check_max_tokens(10**6, "max_tokens")


@pytest.fixture
def clock() -> SimpleNamespace:
    """The limiters' clock (seconds), which a test may move: it starts at the real time."""
    return SimpleNamespace(now=time.time())


@pytest.fixture(params=["memory", "redis"])
async def limiter(request, clock):
    """Each store's limiter (the Redis one on the session's redis-server, its keys under a prefix of this test's), on
    `clock`."""
    if request.param == "memory":
        yield MemoryLimiter(clock=lambda: clock.now)
        return
    server = request.getfixturevalue("redis_server")
    redis = RedisLimiter(server.url, prefix=f"enforcement:{uuid.uuid4().hex}", clock=lambda: clock.now, timeout_s=5.0)
    yield redis
    await redis.close()


@pytest.mark.anyio
async def test_a_request_the_fair_queue_refuses_counts_against_no_limit(tmp_path, limiter):
    """Admitted by the limiter, then refused by a saturated model's queue (429, nothing reached a backend): its request
    and tokens are taken back, as for any refusal, so a burst against a busy model does not eat the tenant's limits;
    the 429's rate-limit headers (OpenAI's and Anthropic's) say so."""
    queue = FairQueue(1)
    gate = PolicyGate(PolicyStore(tmp_path), limiter, {"m": queue})
    policy = Policy(
        "t",
        (Key("k", "0" * 64),),
        Globs(("*",)),
        Limits(requests_per_minute=10, tokens_per_minute=1000, queue_timeout_s=0.01),
    )
    model = SimpleNamespace(id="m")

    async def never_reached():
        raise AssertionError("a refused request reached the backend")
        yield

    async with queue.slot("another", 1, 1, 10):  # the model's one slot is busy
        tenant = TenantRequest(Caller(policy, policy.keys[0]), "rid", anthropic=True)
        rules = RequestPolicy(tenant, gate)
        events = await rules.admit(
            model, 30, 10, lambda: rules.queued(model, 40)(never_reached()), prompt_param="messages"
        )
        with pytest.raises(BackendError) as refused:
            async for _ in events:
                pass
    error = from_backend(refused.value)  # what the client gets: OpenAI's rate-limit shape, Anthropic's on its door
    assert (error.status, error.type, error.code, error.headers()) == (
        429,
        "requests",
        "rate_limit_exceeded",
        {"retry-after": "1"},
    )
    assert anthropic_error(error)["error"]["type"] == "rate_limit_error"
    assert tenant.queue_wait_s > 0  # the audit line's queue_wait_ms: the wait that ended in the refusal
    left = {k: v for k, v in tenant.headers.items() if "remaining" in k}
    assert left == {
        "x-ratelimit-remaining-requests": "10",
        "x-ratelimit-remaining-tokens": "1000",
        "anthropic-ratelimit-requests-remaining": "10",
        "anthropic-ratelimit-tokens-remaining": "1000",
    }
    probe = await gate.limiter.admit("t", policy.limiter_limits, "probe", 0)
    assert probe.headers["x-ratelimit-remaining-requests"] == "9"  # the probe's alone
    assert probe.headers["x-ratelimit-remaining-tokens"] == "1000"


@pytest.mark.anyio
@pytest.mark.parametrize(("prompt_tokens", "param"), [(10, "max_output_tokens"), (70, "input"), (60, "input")])
async def test_a_request_that_never_fits_a_token_limit_names_the_field_to_lower(tmp_path, prompt_tokens, param):
    """The 400 names the door's own field: its max tokens (`max_output_tokens` on the Responses door, not
    `max_tokens`), or its prompt when the prompt alone is over the limit or leaves no token of it for the answer (no
    max tokens would make it fit: it named a max tokens field the client may not even have sent)."""
    gate = PolicyGate(PolicyStore(tmp_path), MemoryLimiter())
    policy = Policy("t", (Key("k", "0" * 64),), Globs(("*",)), Limits(tokens_per_minute=60))
    rules = RequestPolicy(TenantRequest(Caller(policy, policy.keys[0]), "rid"), gate)
    events = rules.admit(
        SimpleNamespace(id="m"), prompt_tokens, 100, None, prompt_param="input", max_tokens_param="max_output_tokens"
    )
    with pytest.raises(APIError) as refused:
        await events
    assert (refused.value.status, refused.value.param, refused.value.code) == (400, param, "tokens_exceed_limit")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("max_tokens", "n", "param", "advice"),
    [
        (40, 1, "max_tokens", "lower max_tokens"),  # one choice: its max tokens alone
        (20, 3, "max_tokens", "lower max_tokens or n"),  # one choice of 20 fits, and 3 of fewer tokens
        (40, 3, "max_tokens", "lower max_tokens"),  # one choice of 40 is over too; 3 of fewer tokens fit
        (30, 40, "n", "lower n"),  # one choice of 30 fits; 40 choices of even one token are over
        (40, 40, "max_tokens", "lower max_tokens and n"),  # neither alone would make it fit
    ],
)
async def test_a_request_over_a_token_limit_by_its_choices_names_n(tmp_path, max_tokens, n, param, advice):
    """`n` multiplies the completion tokens reserved: when it is what pushes a request over, the 400 says so."""
    gate = PolicyGate(PolicyStore(tmp_path), MemoryLimiter())
    policy = Policy("t", (Key("k", "0" * 64),), Globs(("*",)), Limits(tokens_per_minute=60))
    rules = RequestPolicy(TenantRequest(Caller(policy, policy.keys[0]), "rid"), gate)
    events = rules.admit(SimpleNamespace(id="m"), 25, n * max_tokens, None, prompt_param="messages", choices=n)
    with pytest.raises(APIError) as refused:
        await events
    assert (refused.value.status, refused.value.param, refused.value.code) == (400, param, "tokens_exceed_limit")
    assert str(refused.value).endswith(f": {advice}")


@pytest.mark.anyio
async def test_a_queue_refusal_says_what_remains_while_its_charge_has_other_admits_open(tmp_path, limiter):
    """Several admits open under one x-request-id, each refused by the fair queue: a refusal's headers say what its void
    settle really took back. The first admit's request stays counted while a join may still serve it; a join past
    FREE_JOINS, counted as a request of its own, takes its request back; the last void admit takes the request back."""
    queue = FairQueue(1)
    gate = PolicyGate(PolicyStore(tmp_path), limiter, {"m": queue})
    limits = Limits(requests_per_minute=10, tokens_per_minute=1000, queue_timeout_s=0.01)
    policy = Policy("t", (Key("k", "0" * 64),), Globs(("*",)), limits)
    model = SimpleNamespace(id="m")

    async def never_reached():
        raise AssertionError("a refused request reached the backend")
        yield

    async def refused_headers(admitted) -> dict[str, str]:
        tenant, events = admitted
        with pytest.raises(BackendError):
            async for _ in events:
                pass
        return {k: v for k, v in tenant.headers.items() if k.startswith("x-ratelimit-remaining")}

    async def admitted():
        tenant = TenantRequest(Caller(policy, policy.keys[0]), "rid")
        rules = RequestPolicy(tenant, gate)
        return tenant, await rules.admit(
            model, 30, 10, lambda: rules.queued(model, 40)(never_reached()), prompt_param="m"
        )

    async with queue.slot("another", 1, 1, 10):  # the model's one slot is busy
        first, free, free_too, counted = [await admitted() for _ in range(4)]  # one id: a charge and three joins
        assert counted[0].headers["x-ratelimit-remaining-requests"] == "8"  # the charge, and the join past FREE_JOINS
        assert counted[0].headers["x-ratelimit-remaining-tokens"] == "840"
        left = {"x-ratelimit-remaining-requests": "8", "x-ratelimit-remaining-tokens": "880"}
        assert await refused_headers(first) == left  # the joins still open may serve the request: it stays counted
        left = {"x-ratelimit-remaining-requests": "9", "x-ratelimit-remaining-tokens": "920"}
        assert await refused_headers(counted) == left  # its own request and tokens back
        left = {"x-ratelimit-remaining-requests": "9", "x-ratelimit-remaining-tokens": "960"}
        assert await refused_headers(free) == left
        left = {"x-ratelimit-remaining-requests": "10", "x-ratelimit-remaining-tokens": "1000"}
        assert await refused_headers(free_too) == left  # the last one open: nothing served the request


@pytest.mark.anyio
@pytest.mark.parametrize(("steps", "charged"), [(0, 0), (1, 30 + 4)])
async def test_a_backend_failure_before_any_output_counts_against_no_limit(tmp_path, limiter, steps, charged):
    """Every replica refused the request (or failed) before its first token: the client gets an error and nothing
    else, so its request and tokens are taken back as for a fair queue's refusal. A failure after output settles the
    tokens produced."""
    gate = PolicyGate(PolicyStore(tmp_path), limiter)
    policy = Policy("t", (Key("k", "0" * 64),), Globs(("*",)), Limits(requests_per_minute=10, tokens_per_minute=1000))
    tenant = TenantRequest(Caller(policy, policy.keys[0]), "rid")
    rules = RequestPolicy(tenant, gate)

    async def failing():
        for _ in range(steps):
            yield 0, ChoiceStep([], completion_tokens=4)
        raise BackendError("no backend replica could take the request", status=503, retryable=True)

    events = await rules.admit(SimpleNamespace(id="m"), 30, 10, failing, prompt_param="messages")
    with pytest.raises(BackendError):
        async for _ in events:
            pass
    probe = await limiter.admit("t", policy.limiter_limits, "probe", 0)
    assert probe.headers["x-ratelimit-remaining-requests"] == str(10 - 1 - (steps > 0))
    assert probe.headers["x-ratelimit-remaining-tokens"] == str(1000 - charged)
    left = tenant.headers["x-ratelimit-remaining-requests"], tenant.headers["x-ratelimit-remaining-tokens"]
    assert left == (("10", "1000") if steps == 0 else ("9", "960"))  # the error's headers: what remains after it


@pytest.mark.anyio
@pytest.mark.parametrize(("earlier", "reset"), [(False, "0s"), (True, "50s")], ids=["alone", "after_another"])
async def test_a_void_settle_times_the_reset_from_what_the_window_still_holds(tmp_path, limiter, clock, earlier, reset):
    """A request whose backends all failed before any output is taken back: its error's `x-ratelimit-reset-*` say when
    the window is empty once it is (now when nothing else is in it; when an admission 10 s older leaves, else), not when
    the request's own entry would have left; Anthropic's reset is the same time."""
    gate = PolicyGate(PolicyStore(tmp_path), limiter)
    policy = Policy("t", (Key("k", "0" * 64),), Globs(("*",)), Limits(requests_per_minute=10, tokens_per_minute=1000))
    if earlier:
        await limiter.admit("t", policy.limiter_limits, "earlier", 5)  # still running: stays in the window
        clock.now += 10
    tenant = TenantRequest(Caller(policy, policy.keys[0]), "rid", anthropic=True)
    rules = RequestPolicy(tenant, gate)

    async def failing():
        raise BackendError("no backend replica could take the request", status=503, retryable=True)
        yield

    events = await rules.admit(SimpleNamespace(id="m"), 30, 10, failing, prompt_param="messages")
    assert tenant.headers["x-ratelimit-reset-requests"] == "1m0s"  # its own entry is the window's newest
    with pytest.raises(BackendError):
        async for _ in events:
            pass
    assert (tenant.headers["x-ratelimit-reset-requests"], tenant.headers["x-ratelimit-reset-tokens"]) == (reset, reset)
    if not earlier:
        anthropic = dt.datetime.fromisoformat(tenant.headers["anthropic-ratelimit-requests-reset"]).timestamp()
        assert anthropic <= math.ceil(time.time())  # empty now, not a minute from now


@pytest.mark.anyio
@pytest.mark.parametrize("queues", [{}, {"m": 1}], ids=["no_queue", "fair_queue"])
async def test_a_client_that_left_before_a_backend_took_its_request_is_not_charged(tmp_path, limiter, queues):
    """With a fair queue or without, a request whose client left before any backend took it (its events never
    started) is settled void; one whose backend had taken it stays charged its request and prompt tokens."""
    gate = PolicyGate(PolicyStore(tmp_path), limiter, {m: FairQueue(slots) for m, slots in queues.items()})
    policy = Policy("t", (Key("k", "0" * 64),), Globs(("*",)), Limits(requests_per_minute=10, tokens_per_minute=1000))
    model = SimpleNamespace(id="m")

    async def backend():
        yield 0, ChoiceStep(pieces=[], completion_tokens=1)

    for request_id in ("left", "taken"):
        tenant = TenantRequest(Caller(policy, policy.keys[0]), request_id)
        rules = RequestPolicy(tenant, gate)

        def start(rules: RequestPolicy = rules):
            each = rules.queued(model, 40)  # as generate() takes it
            return each(backend()) if each else backend()

        events = await rules.admit(model, 30, 10, start, prompt_param="messages")
        if request_id == "taken":
            await anext(events)
        await events.aclose()
        if tenant.release is not None:  # the middleware's, once the response ended
            await tenant.release()
        remaining = await gate.limiter.admit("t", policy.limiter_limits, f"probe-{request_id}", 0)
        await gate.limiter.settle(remaining, 0, void=True)
        left = remaining.headers["x-ratelimit-remaining-requests"], remaining.headers["x-ratelimit-remaining-tokens"]
        assert left == {"left": ("9", "1000"), "taken": ("8", "969")}[request_id]


@pytest.mark.anyio
async def test_a_request_without_max_tokens_takes_what_the_token_limits_leave(tmp_path, limiter):
    """No max tokens asked: the default budget (the ceiling, the context, or all tokens_per_minute leaves after the
    prompt) was reserved whole, so such a request was a 429 whenever the window held anything. It now reserves what
    the window and the day leave, its budget lowered to that before it starts, and is refused only when they leave
    less than one token per choice; a budget the client set is reserved as it is (a 429)."""
    gate = PolicyGate(PolicyStore(tmp_path), limiter)
    policy = Policy("t", (Key("k", "0" * 64),), Globs(("*",)), Limits(tokens_per_minute=1000, tokens_per_day=1500))
    await limiter.admit("t", policy.limiter_limits, "earlier", 400)  # one request, still running
    started: list[int] = []

    async def request(budgets: list[SamplingParams], asked: int = 900) -> tuple[TenantRequest, list[int]]:
        tenant = TenantRequest(Caller(policy, policy.keys[0]), uuid.uuid4().hex)

        async def answer():
            started.extend(b.max_new_tokens for b in budgets)
            for i, budget in enumerate(budgets):
                yield i, ChoiceStep([], completion_tokens=budget.max_new_tokens, finish_reason="length")

        wanted = sum(b.max_new_tokens for b in budgets) if budgets else asked
        events = await RequestPolicy(tenant, gate).admit(
            SimpleNamespace(id="m"),
            100,
            wanted,
            answer,
            prompt_param="m",
            choices=max(1, len(budgets)),
            defaulted=budgets,
        )
        return tenant, [step.completion_tokens async for _, step in events]

    with pytest.raises(APIError) as refused:
        await request([])  # a budget the client set: 100 + 900 reserved against the 600 left
    assert refused.value.status == 429
    _, produced = await request([SamplingParams(max_new_tokens=450) for _ in range(2)])
    assert produced == started == [250, 250]  # 500 left after the prompt, shared by the 2 choices
    probe = await limiter.admit("t", policy.limiter_limits, "probe", 0)
    assert probe.headers["x-ratelimit-remaining-tokens"] == "0"  # 400 + the 600 it used
    with pytest.raises(APIError) as refused:  # it needs one token more than the window leaves
        await request([SamplingParams(max_new_tokens=900)])
    assert refused.value.status == 429 and started == [250, 250]


@pytest.mark.anyio
async def test_a_refusal_names_whose_limit_refused_the_models_or_the_tenants(tmp_path, limiter):
    """A model with limits of its own (`limits.models`): its 429 names its limit and the model, with that limit's
    headers; the tenant's own limit still holds across its models, and its refusal says so; a request that can never
    fit the model's token limit is a 400 naming it."""
    gate = PolicyGate(PolicyStore(tmp_path), limiter)
    per_model = ModelLimits((("llama-*", LimiterLimits(requests_per_minute=1, tokens_per_minute=50)),))
    policy = Policy(
        f"t-{uuid.uuid4().hex[:8]}", (Key("k", "0" * 64),), Globs(("*",)), Limits(requests_per_minute=2), per_model
    )

    async def served():
        yield 0, ChoiceStep([], completion_tokens=1, finish_reason="stop")

    async def ask(model: str, rid: str, max_tokens: int = 5) -> tuple[dict[str, str], APIError | None]:
        """The request's rate-limit headers, and its error (None: served)."""
        rules = RequestPolicy(TenantRequest(Caller(policy, policy.keys[0]), rid), gate)
        try:
            events = await rules.admit(SimpleNamespace(id=model), 5, max_tokens, served, prompt_param="messages")
            async for _ in events:
                pass
        except APIError as error:
            return rules.tenant.headers, error
        return rules.tenant.headers, None

    _, never = await ask("llama-70b", "r0", max_tokens=100)
    assert (never.status, never.param) == (400, "max_tokens")
    assert "tokens_per_minute for the model 'llama-70b' of 50" in str(never)
    headers, error = await ask("llama-70b", "r1")
    assert error is None and headers["x-ratelimit-limit-requests"] == "1"
    headers, error = await ask("llama-70b", "r2")
    assert (error.status, str(error)) == (429, "rate limit reached: requests_per_minute for the model 'llama-70b'")
    assert (headers["x-ratelimit-limit-requests"], headers["retry-after"]) == ("1", "60")
    assert (await ask("other", "r3"))[1] is None
    headers, error = await ask("llama-8b", "r4")  # the model's own window has room: the tenant's does not
    assert str(error) == "rate limit reached: requests_per_minute across all models"
    assert headers["x-ratelimit-limit-requests"] == "2"
