"""The one Limiter interface both stores share: admit (all or nothing) and settle (shielded, idempotent)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from .headers import rate_limit_headers
from .model import Admission, Limits, Verdict, WindowUse
from .settle_backlog import MissedSettle, SettleBacklog, first_tries_s

log = logging.getLogger("policies.limits")


MAX_TOKENS = 2**50  # hostile counts stay within Redis's 64-bit integers and Lua's exact doubles
STORE_TIMEOUT_S = 0.5
"""The default bound of one call to the limiter's store (RedisLimiter; --redis-timeout)."""


def _bounded(tokens: int) -> int:
    return min(MAX_TOKENS, max(0, int(tokens)))


class StoreUnavailable(Exception):
    """The limiter's store could not be reached or did not answer."""


class Limiter(ABC):
    """Reserve-then-settle admission against a tenant's limits; one implementation per store."""

    def __init__(self) -> None:
        self._store_answers = asyncio.Event()
        self._closing = asyncio.Event()
        self.store_healthy = True
        self.store_errors = 0
        self.restores = 0
        """Times this replica re-registered a tenant's open admissions after the store lost them (Redis only)."""
        self.store_timeout_s = STORE_TIMEOUT_S
        """The bound of one call to the store (how long `close()` gives each of the backlog's first tries)."""
        self._settling: set[asyncio.Task] = set()
        self.settle_backlog = SettleBacklog(self._retry, self._store_answers, self._closing)
        """The settlements the store missed (settle_backlog.py): `pending`, `dropped`, `retry_delays_s`,
        `give_up_s`, `capacity`."""
        self.background: list[Callable[[], Awaitable[None]]] = []
        """Tasks to run while the gateway serves (the Redis limiter's idle-connection sweep)."""

    async def admit(
        self,
        tenant: str,
        limits: Limits,
        charge_id: str,
        tokens: int,
        *,
        least: int | None = None,
        model: str = "",
        model_limits: Limits | None = None,
    ) -> Admission:
        """Reserve one request, one concurrency slot and `tokens` against every window at once, or nothing.
        With `least`, fewer tokens will do: the reservation is what tokens_per_minute and tokens_per_day leave, up to
        `tokens`, and is refused only when they leave less than `least` (`Admission.reserved` says how many).

        An admit with the `charge_id` of a charge still open joins it: the same request, so requests_per_minute
        neither counts nor refuses it (past the charge's first FREE_JOINS joins, it does), but it runs too, so it
        reserves its own slot and tokens (minute and day) like any admit, refused past those limits. When the caller
        is cancelled while the store answers, or the store's answer is lost, whatever the store reserved is taken
        back.

        `model_limits`: the tenant's limits for `model` (its window, slots and day quota of its own, under the tenant's
        own `limits`): admitted only when both allow it, checked and reserved in the same atomic step, and settled
        with it. A refusal says whose limit refused (`Admission.scope`).
        """
        holder = uuid.uuid4().hex
        tokens = _bounded(tokens)
        least = None if least is None else _bounded(least)
        model = model if model_limits is not None else ""
        attempt = asyncio.ensure_future(
            self._admit(tenant, limits, charge_id, tokens, holder, least, model, model_limits)
        )
        reserved = Admission(
            True, None, None, tenant=tenant, charge_id=charge_id, holder=holder, reserved=tokens, model=model
        )
        try:
            verdict = await asyncio.shield(attempt)
        except asyncio.CancelledError:
            self._track(self._undo(attempt, reserved))
            raise
        except StoreUnavailable as exc:
            self._store_failed("admit", tenant, exc)
            self.settle_backlog.add(reserved, 0, void=True, tried=False)  # the store may have run it all the same
            if limits.on_store_error == "open":
                return Admission(
                    True, None, None, status=200, store_error=True, tenant=tenant, charge_id=charge_id, reserved=tokens
                )
            return Admission(
                False,
                "store",
                1.0,
                {"retry-after": "1"},
                status=503,
                store_error=True,
                tenant=tenant,
                charge_id=charge_id,
            )
        self.store_healthy = True
        retry = None if verdict.allowed or verdict.retry_ms is None else verdict.retry_ms / 1000
        return Admission(
            allowed=verdict.allowed,
            limit=verdict.limit,
            retry_after_s=retry,
            headers=rate_limit_headers(limits, verdict, model_limits),
            status=200 if verdict.allowed else 429,
            tenant=tenant,
            charge_id=charge_id,
            holder=holder if verdict.allowed else "",
            reset_at_s=time.time() + verdict.reset_ms / 1000,
            reserved=verdict.reserved if verdict.allowed else 0,
            scope=verdict.scope,
            model=model,
        )

    async def _undo(self, attempt: asyncio.Future, admission: Admission) -> None:
        try:
            verdict = await attempt
        except StoreUnavailable as exc:
            self._store_failed("admit", admission.tenant, exc)
        else:
            if not verdict.allowed:
                return
        await self._settle_or_keep(admission, 0, void=True)  # unanswered: the store may have run it all the same

    async def settle(self, admission: Admission, used_tokens: int, *, void: bool = False) -> WindowUse | None:
        """Replace the reservation with real usage and release the slot; idempotent; survives cancellation.
        `void`: the admission served nothing (no backend took it): its request and tokens are taken back
        as if never made (the request stays counted when another admission of its charge served it, or may still
        serve it). Returns what the tenant's per-minute window holds once the first try landed (None when it did
        not, or nothing was reserved).

        Returns after the first try; when the store is unreachable, the settlement waits in `settle_backlog`, tried
        again in the background (settle_backlog.py: once per pause while the store is away, for `give_up_s` at most,
        `capacity` settlements at most): a longer outage must not leave the tenant's concurrency slot taken for the
        whole lease. A settle is idempotent, so a try whose answer was lost does no harm.
        """
        if not admission.holder:
            return None
        first_try = asyncio.get_running_loop().create_future()
        self._track(self._settle_or_keep(admission, 0 if void else _bounded(used_tokens), first_try, void=void))
        return await asyncio.shield(first_try)

    def _track(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` to its end whatever happens to its caller; `close()` waits for it."""
        task = asyncio.ensure_future(work)
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _settle_or_keep(
        self, admission: Admission, used_tokens: int, first_try: asyncio.Future | None = None, *, void: bool = False
    ) -> None:
        """Try once; a settlement the store missed waits in the backlog."""
        window = None
        try:
            window = await self._settle_once(admission, used_tokens, void)
        finally:
            if first_try is not None and not first_try.done():
                first_try.set_result(window)
        if window is None:
            self.settle_backlog.add(admission, used_tokens, void)

    async def _settle_once(self, admission: Admission, used_tokens: int, void: bool) -> WindowUse | None:
        """The window's use after this settlement, or None when the store did not answer."""
        try:
            window = await self._settle(admission.tenant, admission.charge_id, admission.holder, used_tokens, void)
        except StoreUnavailable as exc:
            self._store_failed("settle", admission.tenant, exc)
            return None
        self.store_healthy = True
        return window

    async def _retry(self, missed: MissedSettle) -> bool:
        return await self._settle_once(missed.admission, missed.used_tokens, missed.void) is not None

    @property
    def store_healthy(self) -> bool:
        """Whether the store's last call succeeded."""
        return self._store_answers.is_set()

    @store_healthy.setter
    def store_healthy(self, healthy: bool) -> None:
        (self._store_answers.set if healthy else self._store_answers.clear)()

    def _store_failed(self, operation: str, tenant: str, exc: Exception) -> None:
        self.store_healthy = False
        self.store_errors += 1
        log.warning("limiter store error during %s for tenant %s: %s", operation, tenant, exc)

    async def probe_store(self) -> bool:
        """Ask the store whether it answers (for readiness checks between requests); updates `store_healthy`."""
        try:
            await self._ping()
        except StoreUnavailable as exc:
            self._store_failed("probe", "-", exc)
        else:
            self.store_healthy = True
        return self.store_healthy

    async def _ping(self) -> None:
        """Raise StoreUnavailable when the store does not answer (a store in this process always does)."""

    @abstractmethod
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
        """Check every limit, the tenant's and (`model_limits`) its model's, and reserve against both, atomically
        (`tokens`, or with `least` what the token limits leave, as windows.fitted); raise StoreUnavailable when the
        store cannot answer."""

    @abstractmethod
    async def _settle(self, tenant: str, charge_id: str, holder: str, used_tokens: int, void: bool) -> WindowUse:
        """Settle this holder of the charge once: its own reservation becomes `used_tokens`, its slot is freed; raise
        StoreUnavailable when the store cannot answer. `void`: its admit served no request (its caller left, or never
        heard the answer): it gives back its own reservation and slot, and the charge's request too when it was the
        last admit open and none served it, as if never made; the same in the window of the model the holder was
        admitted under, when it had limits of its own. Returns the window's use after it (also when the holder had
        settled already; `model`: that model's window, when the holder was open and had one)."""

    async def settled(self) -> None:
        """Wait for the settlements in flight (those retried in the background included)."""
        if self._settling:
            await asyncio.gather(*self._settling, return_exceptions=True)
        await self.settle_backlog.drained()

    async def close(self) -> None:
        """Wait for settlements in flight and the backlog's first retries (no longer than they take against a store
        that does not answer: the rest are left to their lease), then release the store's resources."""
        self._closing.set()
        loop = asyncio.get_running_loop()
        close_by = loop.time() + self.close_budget_s()
        if self._settling:
            await asyncio.gather(*self._settling, return_exceptions=True)
        await self.settle_backlog.close(max(0.0, close_by - loop.time()))

    def close_budget_s(self) -> float:
        """The longest `close()` gives the backlog: its first retries, each try waiting for a turn and its call."""
        return first_tries_s(self.settle_backlog.retry_delays_s, self.store_timeout_s)
