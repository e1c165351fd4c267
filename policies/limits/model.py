"""What a limiter is asked (Limits) and what it answers (Admission, Verdict)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

WINDOW_MS = 60_000
DAY_MS = 86_400_000
RETRY_SCAN = 1000
"""The oldest window entries a refusal reads to time its retry: past them, the same time is read by the sums of the
window's seconds and milliseconds (about 2,000 read at most): a refusal that read a 100,000-entry window held Redis
(every tenant, every replica) for 0.4 s."""
CLEAN_PER_CALL = 100
"""Aged-out window entries (and, in Redis, ended leases) one call takes out of a store at most: the counts never wait
for it (they lose what left the window by sums of its milliseconds and seconds)."""
CONCURRENCY_RETRY_MS = 1000  # a concurrency slot frees when a request ends, which no store can predict
FREE_JOINS = 2
"""Joins of one charge that requests_per_minute does not count: a retry is the same request, and OpenAI's and
Anthropic's client libraries retry twice by default. Each further join counts as a request of its own, so requests
sent under one id stay bounded by requests_per_minute x (1 + FREE_JOINS) when no other limit bounds them."""

LimitName = Literal["requests_per_minute", "tokens_per_minute", "concurrent_requests", "tokens_per_day", "store"]
Scope = Literal["tenant", "model"]
"""Whose limit refused: the tenant's own, or the tenant's limits for the request's model."""


@dataclass(frozen=True)
class Limits:
    """A tenant's limits; None means unlimited."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent_requests: int | None = None
    tokens_per_day: int | None = None
    on_store_error: Literal["open", "closed"] = "closed"

    def __post_init__(self) -> None:
        for name in ("requests_per_minute", "tokens_per_minute", "concurrent_requests", "tokens_per_day"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be a whole number >= 0 or None, not {value!r}")
        if self.on_store_error not in ("open", "closed"):
            raise ValueError(f"on_store_error must be 'open' or 'closed', not {self.on_store_error!r}")


@dataclass(frozen=True)
class Verdict:
    """A store's raw answer to one admit, in integer milliseconds (the same shape for every store).

    `retry_ms` is None when the request can never fit (it alone exceeds the limit); `requests` and `tokens` are what
    the window holds after this admission (before it, on a refusal); `reset_ms` is when the window is empty again.
    """

    allowed: bool
    limit: LimitName | None
    retry_ms: int | None
    requests: int
    tokens: int
    reset_ms: int
    reserved: int = 0
    """The tokens this admission reserved (an admit with `least` reserves what the token limits leave)."""
    scope: Scope = "tenant"
    """Whose `limit` refused (when one did)."""
    model_use: WindowUse | None = None
    """What the model's window holds, as `requests`, `tokens` and `reset_ms` say the tenant's (None: the model has no
    limits of its own)."""


class WindowUse(NamedTuple):
    """What a tenant's per-minute window holds: its requests (entries less free joins) and their tokens, and the
    milliseconds until it is empty again (0 when it is: `x-ratelimit-reset-*`); `model`: the same for the window of
    the settled admission's model when it had limits of its own."""

    requests: int
    tokens: int
    reset_ms: int
    model: WindowUse | None = None


@dataclass(frozen=True)
class Admission:
    """The answer to `Limiter.admit`: allowed or refused (which limit, when to retry), with OpenAI's headers."""

    allowed: bool
    limit: LimitName | None
    retry_after_s: float | None
    headers: dict[str, str] = field(default_factory=dict)
    status: int = 200  # 429 when a limit refused, 503 when the store is unreachable and the tenant fails closed
    store_error: bool = False  # the store was unreachable (admitted open, or refused closed)
    tenant: str = ""
    charge_id: str = ""
    holder: str = ""  # this admit's handle on the charge; "" when nothing was reserved (settle is then a no-op)
    reset_at_s: float = 0.0  # when the per-minute window is empty again (epoch seconds; `x-ratelimit-reset-*`)
    reserved: int = 0  # the tokens reserved (fewer than asked when an admit with `least` took what the limits left)
    scope: Scope = "tenant"  # whose `limit` refused: the tenant's own or its limits for the model
    model: str = ""  # the model whose own limits applied too ("" when none did)
