"""MemoryLimiter: exact limits for one gateway process, in its memory."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from .limiter import Limiter
from .model import DAY_MS, FREE_JOINS, WINDOW_MS, Limits, Verdict, WindowUse
from .windows import fitted, worst_refusal


@dataclass
class _Charge:
    member: str  # the first admit's holder: its window entry is the charge's one request
    holders: dict[str, tuple[int, int]]  # open admits (the first's included) -> (tokens reserved, UTC day)
    served: bool = False  # an admit settled having served the request (not void)
    joins: int = 0  # joins admitted: the first FREE_JOINS are the same request, each further one a request too


@dataclass
class _Tenant:
    log: OrderedDict[str, list[int]] = field(default_factory=OrderedDict)  # holder -> [ts ms, tokens, 1 request|0 join]
    requests: int = 0  # the log's requests (its entries less the joins)
    tokens: int = 0  # the sum of the log's tokens
    slots: set[str] = field(default_factory=set)
    days: dict[int, int] = field(default_factory=dict)  # UTC day number -> tokens charged that day
    charges: dict[str, _Charge] = field(default_factory=dict)  # open charges by charge id

    def expire(self, now: int) -> None:
        while self.log:
            ts, _, _ = next(iter(self.log.values()))
            if ts > now - WINDOW_MS:
                return
            self.drop(next(iter(self.log)))

    def drop(self, holder: str) -> None:
        """Take an admission's entry out of the window (nothing when it left already)."""
        entry = self.log.pop(holder, None)
        if entry is not None:
            self.tokens -= entry[1]
            self.requests -= entry[2]

    def reset_ms(self, now: int) -> int:
        return max(0, next(reversed(self.log.values()))[0] + WINDOW_MS - now) if self.log else 0


class MemoryLimiter(Limiter):
    """Sliding one-minute logs, a per-UTC-day counter and concurrency slots per tenant, in this process.

    `clock` returns wall-clock seconds (UTC days are counted on it); tests inject their own.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self._clock = clock
        self._tenants: dict[str, _Tenant] = {}

    def _now(self) -> int:
        return int(self._clock() * 1000)

    async def _admit(
        self, tenant: str, limits: Limits, charge_id: str, tokens: int, holder: str, least: int | None = None
    ) -> Verdict:
        now = self._now()
        state = self._tenants.setdefault(tenant, _Tenant())
        state.expire(now)
        charge = state.charges.get(charge_id)
        free_join = charge is not None and charge.joins < FREE_JOINS
        day = now // DAY_MS
        window = (state.requests, state.tokens)
        if least is not None and least < tokens:
            tokens = fitted(limits, tokens, least, state.tokens, state.days.get(day, 0))
        refusal = worst_refusal(
            limits,
            tokens,
            now,
            state.log.values(),
            window,
            len(state.slots),
            state.days.get(day, 0),
            join=free_join,
        )
        if refusal is not None:
            return Verdict(False, refusal[0], refusal[1], state.requests, state.tokens, state.reset_ms(now))
        if charge is None:
            charge = state.charges[charge_id] = _Charge(holder, {})
        else:
            charge.joins += 1
        request = int(not free_join)  # a join's tokens and slot are its own in any case
        state.log[holder] = [now, tokens, request]
        state.requests += request
        state.tokens += tokens
        state.slots.add(holder)
        state.days = {d: n for d, n in state.days.items() if d >= day - 1}
        state.days[day] = state.days.get(day, 0) + tokens
        charge.holders[holder] = (tokens, day)
        return Verdict(True, None, None, state.requests, state.tokens, state.reset_ms(now), tokens)

    async def _settle(self, tenant: str, charge_id: str, holder: str, used_tokens: int, void: bool) -> WindowUse:
        state = self._tenants.get(tenant)
        if state is None:
            return WindowUse(0, 0, 0)
        now = self._now()
        state.expire(now)
        charge = state.charges.get(charge_id)
        if charge is None or holder not in charge.holders:
            return WindowUse(state.requests, state.tokens, state.reset_ms(now))
        reserved, day = charge.holders.pop(holder)
        delta = used_tokens - reserved  # this admit's reservation becomes its usage (a void's: nothing)
        entry = state.log.get(holder)
        if entry is not None:
            entry[1] += delta
            state.tokens += delta
        if day in state.days:
            state.days[day] += delta
        state.slots.discard(holder)
        if void and holder != charge.member:
            state.drop(holder)  # a join that served nothing leaves no trace
        charge.served = charge.served or not void
        if not charge.holders:
            if not charge.served:
                state.drop(charge.member)  # no admit served the request: it is taken back
            del state.charges[charge_id]
        return WindowUse(state.requests, state.tokens, state.reset_ms(now))
