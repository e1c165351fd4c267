"""RedisLimiter: limits exact across gateway replicas, checked and reserved atomically in Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from redis.exceptions import RedisError

from .limiter import STORE_TIMEOUT_S, Limiter, StoreUnavailable, log
from .model import CONCURRENCY_RETRY_MS, FREE_JOINS, Limits, Verdict, WindowUse
from .redis_calls import BoundedRedis
from .redis_scripts import ADMIT, RESTORE, SETTLE

T = TypeVar("T")

RESTART_CHECK_S = 1.0
"""Seconds between two reads of Redis's run_id: the longest before a replica re-registers its open admissions after a
restart when it makes no call for their tenants (another replica's admissions are exact again from then on)."""

MARKER_SPARE_MS = 60_000
"""A replica's marker outlives its newest admission's lease by this much, so it never expires while one is open."""


def _arg(limit: int | None) -> int:
    return -1 if limit is None else limit


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _sized(answer: list, count: int) -> list:
    """`answer` when it is a list of `count` values, as the script returns; else ValueError (a corrupted answer)."""
    if not isinstance(answer, list) or len(answer) != count:
        raise ValueError(f"a limiter script's answer of an unknown shape: {answer!r:.200}")
    return answer


def _verdict(answer: list) -> Verdict:
    """The admit script's answer (redis_scripts.ADMIT) as a Verdict."""
    allowed, limit, retry, requests, tokens_used, reset, reserved, scope, *model_use = _sized(answer, 11)
    return Verdict(
        allowed=bool(allowed),
        limit=_text(limit) or None,
        retry_ms=None if retry == -1 or allowed else retry,
        requests=requests,
        tokens=tokens_used,
        reset_ms=reset,
        reserved=reserved,
        scope="model" if _text(scope) == "model" else "tenant",
        model_use=_use(model_use),
    )


def _use(answer: list[int]) -> WindowUse | None:
    """A script's (requests, tokens, reset ms) of a model's window; -1s: none."""
    return None if answer[0] == -1 else WindowUse(*answer)


def model_key(model: str) -> str:
    """The part of a model's keys after the tenant's `M:` prefix: its length first, so no model id's keys can be
    another's, whatever characters it holds."""
    return f"{len(model)}:{model}"


@dataclass(frozen=True)
class _Open:
    """An admission of this replica that Redis holds open: what a restore re-registers."""

    charge_id: str
    tokens: int
    model: str
    """Its model's key (model_key), '' when the model had no limits of its own."""
    lease_end: float
    """Loop time by which its lease has surely ended in Redis (taken before the admit was sent)."""


class RedisLimiter(Limiter):
    """The MemoryLimiter's windows, slots and day counters in Redis, shared by every replica that uses `url`.

    Each admit and settle is one Lua script (atomic), on the server's clock, so replicas agree whatever their own
    clocks say. Every key expires by itself: windows a second after their newest entry leaves, day counters a day
    after their day, concurrency slots after `lease_s` (a replica that dies mid-request frees its slots then; a
    request that runs longer than `lease_s` no longer counts against `concurrent_requests`), open charges after two
    days (a settled charge is deleted). Reconnects by itself, and `background` closes idle connections the server
    closed (redis_idle.py); scripts are reloaded when the server lost them (NOSCRIPT). A script whose connection broke
    is sent again (redis_calls.py): both are idempotent per holder (redis_scripts.py). `timeout_s` bounds each call.
    `clock` (seconds) replaces the server's clock: a test hook.

    Redis that lost its data (a restart without persistence) loses the slots of open requests. Each replica keeps
    its own open admissions and, per tenant where it holds some, a marker key in Redis; an admit or settle for that
    tenant finds the marker gone (in the same script call: no round trip more), and the replica then re-registers
    its open admissions of the tenant (RESTORE) before that call runs again (docs/limits.md).
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "gw:limits",
        lease_s: float = 900.0,
        timeout_s: float = STORE_TIMEOUT_S,
        password: str | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__()
        self.store_timeout_s = timeout_s
        self._calls = BoundedRedis(url, timeout_s, password=password, health_check_interval=0)
        self._redis = self._calls.client
        self._prefix = prefix
        self._lease_ms = int(lease_s * 1000)
        self._marker_ms = self._lease_ms + MARKER_SPARE_MS
        self._clock = clock
        self._admit_script = self._redis.register_script(ADMIT)
        self._settle_script = self._redis.register_script(SETTLE)
        self._restore_script = self._redis.register_script(RESTORE)
        self._replica = uuid.uuid4().hex
        self._open: dict[str, dict[str, _Open]] = {}
        """This replica's open admissions per tenant, by holder."""
        self.restart_check_s = RESTART_CHECK_S
        self.run_id: str | None = None
        """Redis's run_id when `_watch_restarts` last read it (None before its first read)."""
        self.background += [*self._calls.background, self._watch_restarts]

    def _keys(self, tenant: str, charge_id: str) -> list[str]:
        base = f"{self._prefix}:{{{tenant}}}"
        return [  # w2, wa2, ws2, wb2: windows counted by time (redis_scripts.py); replicas of a release before it
            f"{base}:w2",  # (w, wa, wt, wj: counted entry by entry) never read them during a rolling upgrade
            f"{base}:wa2",
            f"{base}:ws2",
            f"{base}:slots",
            f"{base}:c2:{charge_id}",  # c2: charges that keep each admission's reservation; replicas of a release
            # before that (plain c:, one reservation per charge) never read or settle these during a rolling upgrade
            f"{base}:d:",
            f"{base}:wb2",
            f"{base}:m:",
            f"{base}:M:",  # the prefix of the tenant's windows per model (model_key), derived keys of the same tag
        ]

    def _marker(self, tenant: str) -> str:
        return f"{self._prefix}:{{{tenant}}}:r:{self._replica}"

    def _live(self, tenant: str) -> dict[str, _Open]:
        """The tenant's open admissions whose leases have not ended (those that have are forgotten: read at each
        restore and each run_id check, not per call, which only asks whether the tenant has any)."""
        held = self._open.get(tenant, {})
        now = asyncio.get_running_loop().time()
        for holder in [h for h, o in held.items() if o.lease_end <= now]:
            del held[holder]
        if not held:
            self._open.pop(tenant, None)
        return held

    async def _restoring(self, tenant: str, call: Callable[[], Awaitable[T | bytes]]) -> T:
        """`call`'s answer; when it is 'lost' (Redis lost this replica's marker), the tenant's open admissions
        are re-registered first and `call` is sent again, once."""
        answer = await call()
        if answer == b"lost":
            await self._restore(tenant)
            answer = await call()
        if answer == b"lost":
            raise StoreUnavailable("Redis lost its data again while this replica restored its open admissions")
        return answer

    async def _restore(self, tenant: str) -> None:
        """Re-register the tenant's open admissions of this replica (RESTORE), and its marker."""
        held = list(self._live(tenant).items())
        now = asyncio.get_running_loop().time()
        keys, args = self._keys(tenant, "") + [self._marker(tenant)], [self._now_arg(), self._marker_ms]
        for holder, own in held:
            keys.append(self._keys(tenant, own.charge_id)[4])
            args += [holder, own.tokens, own.model, max(1, int((own.lease_end - now) * 1000))]
        async with self._calls.turn():
            await self._restore_script(keys, args)
        self.restores += 1

    async def _watch_restarts(self) -> None:
        """Every `restart_check_s`: when Redis's run_id (INFO server) changed, re-register every tenant's open
        admissions of this replica, so the other replicas count them without waiting for this one's next call."""
        while True:
            await asyncio.sleep(self.restart_check_s)
            try:
                async with self._calls.turn():
                    seen = (await self._redis.info("server")).get("run_id")
                restarted = self.run_id is not None and seen != self.run_id
                for tenant in list(self._open):  # those whose leases all ended are forgotten
                    if self._live(tenant) and restarted:
                        await self._restore(tenant)
                self.run_id = seen
            except RedisError as exc:  # unreachable: the next check (or call) notices the restart
                log.debug("checking Redis for a restart failed: %s", exc)

    def _now_arg(self) -> str:
        return "" if self._clock is None else str(int(self._clock() * 1000))

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
        own = model_limits or Limits()
        scope = "" if model_limits is None else model_key(model)
        args = [
            self._now_arg(),
            tokens,
            _arg(limits.requests_per_minute),
            _arg(limits.tokens_per_minute),
            _arg(limits.concurrent_requests),
            _arg(limits.tokens_per_day),
            holder,
            self._lease_ms,
            CONCURRENCY_RETRY_MS,
            FREE_JOINS,
            _arg(least),
            _arg(own.requests_per_minute),
            _arg(own.tokens_per_minute),
            _arg(own.concurrent_requests),
            _arg(own.tokens_per_day),
            scope,
        ]
        keys = self._keys(tenant, charge_id) + [self._marker(tenant)]
        lease_end = asyncio.get_running_loop().time() + self._lease_ms / 1000

        async def call() -> Verdict | bytes:
            async with self._calls.turn():  # the answer read in the turn: one that does not parse is a RedisError
                answer = await self._admit_script(keys, [*args, int(tenant in self._open), self._marker_ms])
                return answer if answer == b"lost" else _verdict(answer)

        try:
            verdict = await self._restoring(tenant, call)
        except RedisError as exc:
            raise StoreUnavailable(str(exc)) from exc
        if verdict.allowed:
            own = _Open(charge_id, verdict.reserved, scope, lease_end)
            self._open.setdefault(tenant, {})[holder] = own
        return verdict

    async def _settle(self, tenant: str, charge_id: str, holder: str, used_tokens: int, void: bool) -> WindowUse:
        keys = self._keys(tenant, charge_id) + [self._marker(tenant)]

        async def call() -> list | bytes:
            args = [self._now_arg(), holder, used_tokens, int(void), int(holder in self._open.get(tenant, ()))]
            async with self._calls.turn():
                answer = await self._settle_script(keys, args)
                return answer if answer == b"lost" else _sized(answer, 6)

        try:
            answer = await self._restoring(tenant, call)
        except RedisError as exc:
            raise StoreUnavailable(str(exc)) from exc
        self._open.get(tenant, {}).pop(holder, None)
        if not self._open.get(tenant, True):
            del self._open[tenant]
        return WindowUse(*answer[:3], model=_use(answer[3:]))

    async def _ping(self) -> None:
        try:
            async with self._calls.turn():
                await self._redis.ping()
        except RedisError as exc:
            raise StoreUnavailable(str(exc)) from exc

    async def close(self) -> None:
        """Wait for settlements in flight, then close the connections."""
        await super().close()
        await self._redis.aclose()
