"""The one admission step every generating endpoint takes, after planning (prompt tokens known) and
before the backend: the tenant's caps (max tokens, prompt size, tools), the limiter's reservation
(429 with retry-after on refusal), a slot in the model's fair queue, and settlement with the real
usage when the answer ends however it ends. Without policies every step is a no-op."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from backends.base import BackendError, SamplingParams
from gateway.api.door_params import CHAT_PARAMS, DoorParams
from gateway.api.tenancy import PolicyGate, TenantRequest, tenant_of
from gateway.errors import APIError, invalid, rate_limited
from gateway.models.registry import ServedModel
from gateway.observability.tracing import stage
from gateway.types import ChatRequest, ChoiceStep
from policies.limits import Admission as LimiterAdmission
from policies.limits import Limits as LimiterLimits
from policies.limits import QueueTimeout
from policies.limits.headers import after_settle, anthropic_rate_limit_headers

Events = AsyncIterator[tuple[int, ChoiceStep]]
Steps = AsyncIterator[tuple[int, ChoiceStep]]
"""One choice's steps, tagged with its index."""
NO_DEADLINE_S = 1e9
"""The fair queue's own timeout, unused: the request's queue deadline (lifted once it runs) bounds the wait."""


def request_policy(request: Request) -> RequestPolicy:
    """The policy step of `request` (inert when the gateway runs without policies: one for every such request)."""
    tenant, gate = tenant_of(request), request.scope.get("state", {}).get("gate")
    return _INERT if tenant is None and gate is None else RequestPolicy(tenant, gate)


class RequestPolicy:
    """What the caller's policy asks of one request, in the order an endpoint needs it."""

    def __init__(self, tenant: TenantRequest | None, gate: PolicyGate | None):
        self.tenant = tenant
        self._gate = gate

    def check_max_tokens(self, requested: int | None, param: str) -> None:
        """A request's max tokens above the tenant's ceiling is a 400 naming `param`."""
        ceiling = self.tenant and self.tenant.caller.policy.limits.max_tokens
        if ceiling is not None and requested is not None and requested > ceiling:
            raise invalid(f"'{param}' is {requested}; this API key allows at most {ceiling}", param)

    def cap(
        self, max_new_tokens: int, asked: int | None = None, prompt_tokens: int = 0, choices: int = 1, model: str = ""
    ) -> int:
        """The tenant's max-tokens ceiling as the default (and bound) of a request's token budget. A request that
        asked for no max tokens (`asked` None) also gets no more than its tenant's token limits, and those of its
        `model` (`limits.models`), leave after its prompt (`prompt_tokens`, all its prompts), shared by its
        `choices`: a default, unlike a number the client sent, must not make a request that could never fit (OpenAI's
        limits do not refuse one either)."""
        if self.tenant is None:
            return max_new_tokens
        policy = self.tenant.caller.policy
        limits = policy.limits
        bound = max_new_tokens if limits.max_tokens is None else min(max_new_tokens, limits.max_tokens)
        if asked is not None:
            return bound
        own = policy.model_limits.for_model(model)
        token_limits = [limits.tokens_per_minute, limits.tokens_per_day]
        if own is not None:
            token_limits += [own.tokens_per_minute, own.tokens_per_day]
        for limit in token_limits:
            if limit is not None and limit - prompt_tokens >= choices:  # else the prompt (or n) is what to lower
                bound = min(bound, (limit - prompt_tokens) // choices)
        return bound

    def check_tools(
        self, chat: ChatRequest, body_tools: Sequence[Any] | None = None, params: DoorParams = CHAT_PARAMS
    ) -> ChatRequest:
        """403 naming the first declared tool outside `tools.allow`; `tools.strict` always/never applied.
        `body_tools`: the tools the body declares, in its order and shape, read by the door's `params` (default:
        `chat`'s own); an allowed_tools choice may have kept some out of `chat`: declaring them is refused all the
        same."""
        if self.tenant is None:
            return chat
        policy = self.tenant.caller.policy
        for i, tool in enumerate(chat.tools if body_tools is None else body_tools):
            name = params.tool_name(tool)
            if policy.tools_allow is not None and not policy.tools_allow.match(name):
                raise APIError(
                    f"the tool {name!r} is not allowed for this API key",
                    status=403,
                    param=f"{params.tool.format(i=i)}.name",
                    code="tool_not_allowed",
                    type="permission_error",
                )
        if policy.tools_strict == "client" or not chat.tools:
            return chat
        strict = policy.tools_strict == "always"
        tools = [{**t, "function": {**t["function"], "strict": strict}} for t in chat.tools]
        return dataclasses.replace(chat, tools=tools)

    def queued(self, model: ServedModel, tokens: int) -> Callable[[Steps], Steps] | None:
        """A wrapper marking the request served once a backend takes one of its choices (a request no backend took
        is settled void), giving each choice (of up to `tokens`: prompt + its max tokens) a slot of the model's
        fair queue first where it has one, released when it ends; None without policies.
        The tenant's queue deadline bounds the wait until the request's first choice runs (then a 429);
        its other choices then wait for their turn as long as the request runs."""
        if self.tenant is None or self._gate is None:
            return None
        tenant, policy = self.tenant, self.tenant.caller.policy
        tenant.served = False
        queue = self._gate.queues.get(model.id)
        if queue is None:
            return functools.partial(_taken, tenant)
        share = self._gate.share(model.id, policy.tenant)
        deadline_s = policy.limits.queue_timeout_s
        deadlines: set[asyncio.Timeout] = set()
        """One per choice still waiting: the first choice to get a slot lifts them all (the request runs)."""

        async def in_queue(steps: Steps) -> Steps:
            started = time.monotonic()
            async with AsyncExitStack() as held:
                try:
                    async with asyncio.timeout(deadline_s) as deadline:
                        deadlines.add(deadline)
                        try:
                            with stage("gateway.queue"):
                                await share.acquire()
                                held.callback(share.release)
                                slot = queue.slot(policy.tenant, policy.weight, tokens, NO_DEADLINE_S)
                                await held.enter_async_context(slot)
                        finally:
                            deadlines.discard(deadline)
                            tenant.queue_wait_s = max(tenant.queue_wait_s, time.monotonic() - started)  # refused too
                    for waiting in deadlines:
                        if not waiting.expired():
                            waiting.reschedule(None)
                except (TimeoutError, QueueTimeout):
                    raise BackendError(
                        f"the model {model.id!r} is saturated: no slot within this API key's {deadline_s:g} s "
                        "queue deadline",
                        status=429,
                        code="rate_limit_exceeded",
                        retry_after=1,
                    ) from None
                async with aclosing(_taken(tenant, steps)) as taken:
                    async for step in taken:
                        yield step

        return in_queue

    def admit_unlimited(self, model: ServedModel, choices: int, start: Callable[[], Events]) -> Events | None:
        """`admit` for a request without policies, which awaits nothing (a caller spares the coroutine): the events
        of `start()`, its `choices` counted against the model's backend slots; None for a request with policies."""
        if self.tenant is not None and self._gate is not None:
            return None
        return _slotted(model, choices, None, start)

    async def admit(
        self,
        model: ServedModel,
        prompt_tokens: int,
        completion_tokens: int,
        start: Callable[[], Events],
        *,
        prompt_param: str,
        max_tokens_param: str = "max_tokens",
        prompt: Any = None,
        choices: int = 1,
        n: int | None = None,
        defaulted: Sequence[SamplingParams] = (),
    ) -> Events:
        """Admit a request of `prompt_tokens` that may generate `completion_tokens` (all `choices`, `n` samples of
        each prompt: all the choices when None, as for a chat's one prompt; 1 on a door without `n`):
        400 over max_prompt_tokens, 429 (or 503 when the store is down and the tenant fails closed)
        when the limiter refuses. `defaulted`: the budgets of a request that set no max tokens: it takes what the
        tenant's token limits leave now (up to `completion_tokens`), refused only when that is less than one token
        per choice, and these budgets are lowered to it (the answer then ends with finish_reason length).
        Returns the events of `start()` (called once admitted), settling the real usage when they end.
        Without policies, the choices are counted against the model's backend slots instead
        (gateway/models/slots.py)."""
        tenant = self.tenant
        if tenant is None or self._gate is None:
            return _slotted(model, choices, n, start)
        policy = tenant.caller.policy
        tenant.model = model.id
        tenant.prompt_tokens = prompt_tokens
        if policy.audit_prompts:
            tenant.prompt = prompt
        if policy.limits.max_prompt_tokens is not None and prompt_tokens > policy.limits.max_prompt_tokens:
            raise invalid(
                f"the prompt is {prompt_tokens} tokens; this API key allows at most {policy.limits.max_prompt_tokens}",
                prompt_param,
                "prompt_too_long",
            )
        reserved = prompt_tokens + completion_tokens
        limiter = self._gate.limiter
        least = min(reserved, prompt_tokens + choices) if defaulted else None
        own = policy.model_limits.for_model(model.id)
        verdict = await limiter.admit(
            policy.tenant,
            policy.limiter_limits,
            f"{policy.tenant}:{tenant.request_id}",
            reserved,
            least=least,
            model=model.id,
            model_limits=own,
        )
        tenant.headers = _headers(verdict.headers, verdict.reset_at_s, tenant.anthropic)
        if not verdict.allowed:
            asked = _Asked(prompt_tokens, reserved, choices, choices if n is None else n)
            limits = own if verdict.scope == "model" and own is not None else policy.limiter_limits
            raise _refusal(verdict, limits, asked, (prompt_param, max_tokens_param))
        if defaulted and verdict.reserved < reserved:
            each = (verdict.reserved - prompt_tokens) // choices
            for sampling in defaulted:
                sampling.max_new_tokens = min(sampling.max_new_tokens, each)
        try:
            events = start()
        except BaseException:
            await limiter.settle(verdict, 0, void=True)
            raise
        counted = _Usage(prompt_tokens)

        async def release() -> None:
            tenant.release = None
            tenant.completion_tokens = sum(counted.completion)
            used = prompt_tokens + tenant.completion_tokens
            void = not tenant.served  # a refusal (a queue's, every replica's) is not counted
            window = await limiter.settle(verdict, used, void=void)
            if void and window is not None:  # its error says what remains, and when it resets, once it is taken back
                reset_at_s = time.time() + window.reset_ms / 1000
                settled = after_settle(verdict.headers, window, policy.limiter_limits, own)
                tenant.headers = _headers(settled, reset_at_s, tenant.anthropic)

        tenant.release = release
        return _settled(events, counted, tenant)


def _slotted(model: ServedModel, choices: int, n: int | None, start: Callable[[], Events]) -> Events:
    """The events of `start()`, its `choices` (`n` samples of each prompt) counted against the model's backend
    slots (gateway/models/slots.py) where they are known: a request without policies."""
    if model.choice_slots is None:
        return start()
    model.choice_slots.check(choices, n)
    return model.choice_slots.hold(choices, start())


_INERT = RequestPolicy(None, None)
"""The policy step of every request served without policies (it holds nothing of a request's own)."""


async def _taken(tenant: TenantRequest, steps: Steps) -> Steps:
    """`steps`, marking the request served as they start: a backend took it, so it is charged."""
    tenant.served = True
    async with aclosing(steps):
        async for step in steps:
            yield step


def _headers(openai: dict[str, str], reset_at_s: float, anthropic: bool) -> dict[str, str]:
    """The rate-limit headers every response of a request carries: OpenAI's, and Anthropic's names on its door
    (`reset_at_s`: when the window is empty again, epoch seconds)."""
    if not anthropic:
        return dict(openai)
    return {**openai, **anthropic_rate_limit_headers(openai, reset_at_s)}


@dataclass
class _Usage:
    prompt: int
    completion: list[int] = field(default_factory=list)


async def _settled(events: Events, usage: _Usage, tenant: TenantRequest) -> Events:
    """`events`, counting each choice's completion tokens; settles when they end (finished, stopped,
    failed, or closed early by a client that left). A backend failure before any output served nothing: settled void."""
    try:
        async for index, step in events:
            if index >= len(usage.completion):
                usage.completion += [0] * (index + 1 - len(usage.completion))
            usage.completion[index] = step.completion_tokens
            tenant.cached_tokens = max(tenant.cached_tokens, step.cached_tokens)
            if step.finish_reason is not None:
                tenant.finish_reason = step.finish_reason
            yield index, step
    except BackendError:
        if not usage.completion:  # the client gets the error and nothing else
            tenant.served = False
        raise
    finally:
        await events.aclose()
        if tenant.release is not None:
            await tenant.release()


@dataclass(frozen=True)
class _Asked:
    """What a request asked the limiter for: its prompt, all it reserved, its choices and its samples per prompt."""

    prompt_tokens: int
    reserved: int
    choices: int
    n: int

    def advice(self, limit: int, max_tokens_param: str) -> tuple[str, str]:
        """What the client can lower to fit `limit` (the prompt alone fits), and the field to name."""
        if self.n == 1:
            return f"lower {max_tokens_param}", max_tokens_param
        one_sample = self.prompt_tokens + (self.reserved - self.prompt_tokens) // self.n
        fewer_samples, fewer_tokens = one_sample <= limit, self.prompt_tokens + self.choices <= limit
        if fewer_samples and fewer_tokens:
            return f"lower {max_tokens_param} or n", max_tokens_param
        if fewer_samples:
            return "lower n", "n"
        if fewer_tokens:
            return f"lower {max_tokens_param}", max_tokens_param
        return f"lower {max_tokens_param} and n", max_tokens_param


def _refusal(verdict: LimiterAdmission, limits: LimiterLimits, asked: _Asked, params: tuple[str, str]) -> APIError:
    """The error of a refused admission: 503 (store down, failing closed), 400 (the request alone is over a token
    limit: it would never fit; naming the prompt's field when the prompt alone is, else the max tokens' field of
    `params` or `n`, whichever the client can lower), else 429 with OpenAI's code and type. `limits`: those of the
    refusing scope (the tenant's own, or its limits for the model), whose limit the message names."""
    if verdict.status == 503:
        return APIError(
            "the rate-limit store is unreachable and this API key's policy fails closed",
            status=503,
            code="rate_limit_store_unavailable",
            type="server_error",
        )
    whose = ""  # whose limit refused, when the model has limits of its own too
    if verdict.model:
        whose = f" for the model {verdict.model!r}" if verdict.scope == "model" else " across all models"
    if verdict.retry_after_s is None and verdict.limit in ("tokens_per_minute", "tokens_per_day"):
        limit, (prompt_param, max_tokens_param) = getattr(limits, verdict.limit), params
        if asked.prompt_tokens >= limit:  # no max tokens (1 at least) and no n would make it fit
            over = "more than" if asked.prompt_tokens > limit else "leaving no token of"
            return invalid(
                f"the prompt is {asked.prompt_tokens} tokens, {over} this API key's {verdict.limit}{whose} of {limit}",
                prompt_param,
                "tokens_exceed_limit",
            )
        advice, param = asked.advice(limit, max_tokens_param)
        counted = "prompt + max tokens" if asked.n == 1 else "prompt + max tokens of each choice"
        return invalid(
            f"this request needs up to {asked.reserved} tokens ({counted}), more than this API key's "
            f"{verdict.limit}{whose} of {limit}: {advice}",
            param,
            "tokens_exceed_limit",
        )
    kind = "tokens" if verdict.limit in ("tokens_per_minute", "tokens_per_day") else "requests"
    return rate_limited(f"rate limit reached: {verdict.limit}{whose}", kind)
