"""MemoryLimiter: exact limits for one gateway process, in its memory."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice

from .limiter import Limiter
from .model import (
    CLEAN_PER_CALL,
    DAY_MS,
    FREE_JOINS,
    RETRY_SCAN,
    WINDOW_MS,
    LimitName,
    Limits,
    Verdict,
    WindowUse,
)
from .windows import fitted, worst, worst_refusal


@dataclass
class _Charge:
    member: str  # the first admit's holder: its window entry is the charge's one request
    member_model: str  # the model whose own window holds the member's entry too ("" none)
    holders: dict[str, tuple[int, int, str]]  # open admits (the first's included) -> (tokens reserved, UTC day, model)
    served: bool = False  # an admit settled having served the request (not void)
    joins: int = 0  # joins admitted: the first FREE_JOINS are the same request, each further one a request too


@dataclass
class _Window:
    """One window (a tenant's, or its limits' for one model): its entries in admission order, and sums by ms and by
    second of those still in it, its concurrency slots and its tokens per UTC day.

    An entry leaves the counts when its time is at or before `done` (the last call's cutoff): a call subtracts what
    was admitted since the last cutoff by those sums (about 2,000 read at most, however many entries left) and takes
    at most CLEAN_PER_CALL aged-out entries out of `log` (a log all of which left is set aside whole, and cleaned from
    there), so a call after a burst is no stall (Redis does the same).
    """

    log: OrderedDict[str, list[int]] = field(default_factory=OrderedDict)  # holder -> [ts ms, tokens, 1 request|0 join]
    aged: deque[OrderedDict[str, list[int]]] = field(default_factory=deque)  # logs all of which left, being cleaned
    requests: int = 0  # the window's requests (its entries less the joins)
    tokens: int = 0  # the sum of the window's tokens
    done: int | None = None  # entries at or before this ms have left the window (None: none admitted yet)
    ms_sums: dict[int, list[int]] = field(
        default_factory=dict
    )  # ms -> its [tokens, requests], until its entries are cleaned
    second_sums: dict[int, list[int]] = field(default_factory=dict)  # second -> the same, until it has left whole
    slots: set[str] = field(default_factory=set)
    days: dict[int, int] = field(default_factory=dict)  # UTC day number -> tokens charged that day

    def expire(self, now: int) -> None:
        """Take what was admitted up to `now - WINDOW_MS` out of the counts; clean a few aged-out entries."""
        cutoff = now - WINDOW_MS
        if self.done is None or not self.log or next(reversed(self.log.values()))[0] <= cutoff:
            self.requests = self.tokens = 0  # all of it left: its entries wait aside, so none is read as in it
            self.ms_sums, self.second_sums = {}, {}
            if self.log:
                self.aged.append(self.log)
                self.log = OrderedDict()
        elif cutoff > self.done:
            tokens, requests = self._between(self.done, cutoff)
            self.tokens -= tokens
            self.requests -= requests
            for second in range((self.done + 1) // 1000, (cutoff + 1) // 1000):  # the seconds that left whole
                self.second_sums.pop(second, None)
        self.done = max(cutoff, self.done if self.done is not None else cutoff)
        self._clean()

    def _between(self, after: int, upto: int) -> tuple[int, int]:
        """The tokens and requests admitted in (after, upto] ms (less than WINDOW_MS): whole seconds by their sums."""
        tokens = requests = 0
        ms = after + 1
        while ms <= upto:
            whole = ms % 1000 == 0 and ms + 999 <= upto
            t, r = (self.second_sums.get(ms // 1000) if whole else self.ms_sums.get(ms)) or (0, 0)
            tokens, requests = tokens + t, requests + r
            ms += 1000 if whole else 1
        return tokens, requests

    def _clean(self) -> None:
        """Take up to CLEAN_PER_CALL entries that left the window out: of the logs set aside first, then of `log`."""
        budget = CLEAN_PER_CALL
        while self.aged and budget:
            log = self.aged[0]
            taken = min(budget, len(log))
            for _ in range(taken):
                log.popitem(last=False)
            budget -= taken
            if not log:
                self.aged.popleft()
        for _ in range(budget):
            if not self.log:
                return
            holder, (ts, _, _) = next(iter(self.log.items()))
            if ts > self.done:
                return
            del self.log[holder]
            self.ms_sums.pop(ts, None)

    def add(self, holder: str, ts: int, tokens: int, request: int) -> None:
        self.log[holder] = [ts, tokens, request]
        if self.done is None or ts > self.done:  # not when the clock went back past the window
            self.tally(ts, tokens, request)

    def tally(self, ts: int, tokens: int, requests: int) -> None:
        """Add to the window's counts and to the sums of `ts`'s ms and second."""
        self.tokens += tokens
        self.requests += requests
        for sums, key in ((self.ms_sums, ts), (self.second_sums, ts // 1000)):
            pair = sums.setdefault(key, [0, 0])
            pair[0] += tokens
            pair[1] += requests
            if pair == [0, 0]:  # its entries were taken back: no key left for the cleaning to miss
                del sums[key]

    def live(self, holder: str) -> list[int] | None:
        """An admission's entry while it is in the window, else None."""
        entry = self.log.get(holder)
        return entry if entry is not None and self.done is not None and entry[0] > self.done else None

    def drop(self, holder: str) -> None:
        """Take an admission's entry out of the window (nothing when it left already)."""
        entry = self.live(holder)
        if entry is not None:
            del self.log[holder]
            self.tally(entry[0], -entry[1], -entry[2])

    def window(self) -> Iterator[list[int]]:
        """The window's entries, oldest first, among the oldest RETRY_SCAN entries not yet cleaned (a refusal's
        retry past them is read by the sums: `free_by_sums`)."""
        return (e for e in islice(self.log.values(), RETRY_SCAN) if self.done is None or e[0] > self.done)

    def free_by_sums(self, need: int, index: int, now: int) -> int:
        """Milliseconds until the window's oldest admissions have freed `need` tokens (`index` 0) or requests (1),
        read by the sums of their seconds, then of the milliseconds of the second where they have (about 2,000 read at
        most, however many entries, aged-out ones not yet cleaned included, come first in the log)."""
        if not self.log or self.done is None:
            return self.reset_ms(now)
        newest = next(reversed(self.log.values()))[0]
        freed, ms = 0, self.done + 1
        while ms <= newest:
            if ms % 1000 == 0:  # a whole second in the window: by its sum, unless `need` is freed within it
                weight = (self.second_sums.get(ms // 1000) or (0, 0))[index]
                if freed + weight < need:
                    freed, ms = freed + weight, ms + 1000
                    continue
            freed += (self.ms_sums.get(ms) or (0, 0))[index]
            if freed >= need:
                return max(0, ms + WINDOW_MS - now)
            ms += 1
        return self.reset_ms(now)

    def reset_ms(self, now: int) -> int:
        return max(0, next(reversed(self.log.values()))[0] + WINDOW_MS - now) if self.log else 0

    def use(self, now: int) -> WindowUse:
        return WindowUse(self.requests, self.tokens, self.reset_ms(now))

    def refusal(self, limits: Limits, tokens: int, now: int, join: bool) -> tuple[LimitName, int | None] | None:
        """The limit of `limits` that refuses `tokens` more for longest, or None."""
        day_used = self.days.get(now // DAY_MS, 0)
        window = (self.requests, self.tokens)

        def by_sums(need: int, index: int) -> int:
            return self.free_by_sums(need, index, now)

        return worst_refusal(limits, tokens, now, self.window, window, by_sums, len(self.slots), day_used, join=join)

    def reserve(self, holder: str, now: int, tokens: int, request: int) -> None:
        """Count an admission: its entry, its slot and its day's tokens."""
        day = now // DAY_MS
        self.add(holder, now, tokens, request)
        self.slots.add(holder)
        self.days = {d: n for d, n in self.days.items() if d >= day - 1}
        self.days[day] = self.days.get(day, 0) + tokens

    def settle(self, holder: str, delta: int, day: int, drop: bool) -> None:
        """An admission's reservation changed by `delta` (its usage replaces it), its slot freed, its entry `drop`ped."""
        entry = self.live(holder)
        if entry is not None:
            entry[1] += delta
            self.tally(entry[0], delta, 0)
        if day in self.days:
            self.days[day] += delta
        self.slots.discard(holder)
        if drop:
            self.drop(holder)


@dataclass
class _Tenant(_Window):
    """A tenant's own window, its open charges, and the windows of its models that have limits of their own."""

    charges: dict[str, _Charge] = field(default_factory=dict)  # open charges by charge id
    models: dict[str, _Window] = field(default_factory=dict)  # model id -> its window (models of the registry)


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
        self,
        tenant: str,
        limits: Limits,
        charge_id: str,
        tokens: int,
        holder: str,
        least: int | None = None,
        model: str = "",
        model_limits: Limits | None = None,
    ) -> Verdict:
        now = self._now()
        state = self._tenants.setdefault(tenant, _Tenant())
        state.expire(now)
        own, counted = None, ""  # `counted`: the model whose window this admit counts in ("" for none)
        if model_limits is not None:
            own, counted = state.models.setdefault(model, _Window()), model
            own.expire(now)
        charge = state.charges.get(charge_id)
        free_join = charge is not None and charge.joins < FREE_JOINS
        free_here = free_join and charge.member_model == counted  # the model's window counted the first admit
        day = now // DAY_MS
        if least is not None and least < tokens:
            tokens = fitted(limits, tokens, least, state.tokens, state.days.get(day, 0))
            if own is not None:
                tokens = fitted(model_limits, tokens, least, own.tokens, own.days.get(day, 0))  # within both
        refusal, scope = state.refusal(limits, tokens, now, free_join), "tenant"
        if own is not None:
            theirs = own.refusal(model_limits, tokens, now, free_here)
            pick = worst((refusal, theirs))
            if pick is not None and (refusal, theirs).index(pick) == 1:  # the tenant's on a tie, as worst()
                refusal, scope = theirs, "model"
        model_use = None if own is None else own.use(now)
        if refusal is not None:
            return Verdict(
                False, *refusal, state.requests, state.tokens, state.reset_ms(now), scope=scope, model_use=model_use
            )
        if charge is None:
            charge = state.charges[charge_id] = _Charge(holder, counted, {})
        else:
            charge.joins += 1
        request = int(not free_join)  # a join's tokens and slot are its own in any case
        state.reserve(holder, now, tokens, request)
        if own is not None:
            own.reserve(holder, now, tokens, int(not free_here))
            model_use = own.use(now)
        charge.holders[holder] = (tokens, day, counted)
        return Verdict(True, None, None, state.requests, state.tokens, state.reset_ms(now), tokens, model_use=model_use)

    async def _settle(self, tenant: str, charge_id: str, holder: str, used_tokens: int, void: bool) -> WindowUse:
        state = self._tenants.get(tenant)
        if state is None:
            return WindowUse(0, 0, 0)
        now = self._now()
        state.expire(now)
        charge = state.charges.get(charge_id)
        if charge is None or holder not in charge.holders:
            return state.use(now)
        reserved, day, model = charge.holders.pop(holder)
        delta = used_tokens - reserved  # this admit's reservation becomes its usage (a void's: nothing)
        own = state.models.get(model) if model else None
        drop = void and holder != charge.member  # a join that served nothing leaves no trace
        state.settle(holder, delta, day, drop)
        if own is not None:
            own.expire(now)
            own.settle(holder, delta, day, drop)
        charge.served = charge.served or not void
        if not charge.holders:
            if not charge.served:  # no admit served the request: it is taken back
                state.drop(charge.member)
                theirs = state.models.get(charge.member_model)
                if theirs is not None:
                    if theirs is not own:
                        theirs.expire(now)
                    theirs.drop(charge.member)
            del state.charges[charge_id]
        return WindowUse(state.requests, state.tokens, state.reset_ms(now), None if own is None else own.use(now))
