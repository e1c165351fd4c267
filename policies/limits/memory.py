"""MemoryLimiter: exact limits for one gateway process, in its memory."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from .limiter import Limiter
from .model import CONCURRENCY_RETRY_MS, DAY_MS, WINDOW_MS, Limits, Verdict
from .windows import worst_refusal


@dataclass
class _Charge:
    member: str
    reserved: int
    day: int
    holders: set[str]
    settled: bool = False


@dataclass
class _Tenant:
    log: OrderedDict[str, list[int]] = field(default_factory=OrderedDict)  # member -> [ts ms, tokens], oldest first
    tokens: int = 0  # the sum of the log's tokens
    slots: set[str] = field(default_factory=set)
    days: dict[int, int] = field(default_factory=dict)  # UTC day number -> tokens charged that day
    charges: dict[str, _Charge] = field(default_factory=dict)  # open charges by charge id

    def expire(self, now: int) -> None:
        while self.log:
            ts, amount = next(iter(self.log.values()))
            if ts > now - WINDOW_MS:
                return
            self.log.popitem(last=False)
            self.tokens -= amount

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

    async def _admit(self, tenant: str, limits: Limits, charge_id: str, tokens: int, holder: str) -> Verdict:
        now = self._now()
        state = self._tenants.setdefault(tenant, _Tenant())
        state.expire(now)
        charge = state.charges.get(charge_id)
        if charge is not None:  # a join: counted once, but it runs too, so it holds a concurrency slot of its own
            conc = limits.concurrent_requests
            if conc is not None and len(state.slots) + 1 > conc:
                retry = None if conc == 0 else CONCURRENCY_RETRY_MS
                return Verdict(False, "concurrent_requests", retry, len(state.log), state.tokens, state.reset_ms(now))
            state.slots.add(holder)
            charge.holders.add(holder)
            return Verdict(True, None, None, len(state.log), state.tokens, state.reset_ms(now), charge.member)
        day = now // DAY_MS
        refusal = worst_refusal(
            limits, tokens, now, state.log.values(), state.tokens, len(state.slots), state.days.get(day, 0)
        )
        if refusal is not None:
            return Verdict(False, refusal[0], refusal[1], len(state.log), state.tokens, state.reset_ms(now))
        state.log[holder] = [now, tokens]
        state.tokens += tokens
        state.slots.add(holder)
        state.days = {d: n for d, n in state.days.items() if d >= day - 1}
        state.days[day] = state.days.get(day, 0) + tokens
        state.charges[charge_id] = _Charge(holder, tokens, day, {holder})
        return Verdict(True, None, None, len(state.log), state.tokens, state.reset_ms(now), holder)

    async def _settle(self, tenant: str, charge_id: str, holder: str, used_tokens: int, void: bool) -> None:
        state = self._tenants.get(tenant)
        charge = state.charges.get(charge_id) if state else None
        if charge is None or holder not in charge.holders:
            return
        state.expire(self._now())
        if void and not charge.settled and charge.holders == {holder}:
            entry = state.log.pop(charge.member, None)
            if entry is not None:
                state.tokens -= entry[1]
            if charge.day in state.days:
                state.days[charge.day] -= charge.reserved
            state.slots.discard(charge.member)
            del state.charges[charge_id]
            return
        delta = used_tokens if charge.settled else used_tokens - charge.reserved
        entry = state.log.get(charge.member)
        if entry is not None:
            entry[1] += delta
            state.tokens += delta
        if charge.day in state.days:
            state.days[charge.day] += delta
        charge.settled = True
        charge.holders.discard(holder)
        state.slots.discard(holder)  # each admit's own slot (the first admit's holder is the member)
        if not charge.holders:
            del state.charges[charge_id]
