"""Tenant limits: reserve-then-settle limiters (in memory or in Redis) and fair queues per model.

The API (a contract with the policy engine):

- `Limits(requests_per_minute, tokens_per_minute, concurrent_requests, tokens_per_day, on_store_error="closed")`,
  frozen; each limit `int | None` (None: unlimited; anything but a whole number >= 0 is a ValueError).
- `Limiter`, one interface for two stores: `MemoryLimiter(clock=time.time)` (one process) and
  `RedisLimiter(url, prefix=..., lease_s=900, timeout_s=0.5)` (exact across replicas: one Lua script per call,
  atomic, on the server's clock, keys that expire by themselves).
  - `await limiter.admit(tenant, limits, charge_id, tokens, least=None, model="", model_limits=None) -> Admission`: reserves one request, one
    concurrency slot and `tokens` (prompt tokens + the request's max tokens) against every limit at once, or nothing. An admit
    whose `charge_id` names a charge still open (a retry on another replica) joins it: the same request, which
    requests_per_minute does not count again (past the charge's first FREE_JOINS joins it does), but it runs too, so
    it reserves its own slot and tokens, refused past those limits. With `least`, the token reservation is what
    tokens_per_minute and tokens_per_day leave, up to `tokens`, refused below `least` (`Admission.reserved`).
    With `model_limits` (the tenant's limits for `model`), the model's own window, slots and day quota are checked
    and reserved in the same atomic step: admitted only when both allow (`Admission.scope` says whose limit refused,
    `Admission.model` the model whose limits applied), settled alike. Charge ids are per tenant. Token counts are bounded to 2**50. If the caller is cancelled while the store
    answers, whatever was reserved is taken back whole (request, tokens, slot; a joined charge stays).
  - `await limiter.settle(admission, used_tokens, void=False)`: replaces the reservation with real usage (prompt +
    completion tokens produced) and releases the slot when the charge's last admit settles; idempotent, a no-op for a
    refused admission, shielded from cancellation (call it from a `finally`). A joined admit's usage adds to the
    charge. `void=True`: the admission served nothing (refused by a fair queue, its client left before a backend took it): its
    tokens and, unless another admit of its charge served it (or, still open, may serve it), its request are taken
    back; the same in its model's window when it was admitted with `model_limits`. Returns the tenant's per-minute
    window use after it (`WindowUse(requests, tokens, reset_ms, model)`, reset_ms the time until it is empty again,
    `model` the model's window, or None; None when the first try did not land or nothing was reserved): a refusal's
    `x-ratelimit-remaining-*` and `x-ratelimit-reset-*` (`headers.after_settle`).
    When the store is unreachable it returns after the first try and retries in the background
    from a bounded backlog (`limiter.settle_backlog`: its `retry_delays_s`, then whenever the store answers again,
    for `give_up_s` at most, `capacity` settlements at most, the oldest dropped to its lease past it: an outage longer
    than the first retries must not hold a tenant's concurrency slot for the whole lease);
    `await limiter.close()` waits for settlements in flight (those past the first retries stop).
  - `Admission`: `allowed`, `limit` (the refusing limit's name, "store" when the store is down, else None),
    `retry_after_s` (exact: when enough of the window frees; None when the request alone exceeds the limit and
    never fits; 1 s for a concurrency refusal, whose end no store can predict), `headers` (OpenAI's
    `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` for the per-minute limits the tenant has, `retry-after`
    and `retry-after-ms` on a refusal), `status` (200, 429, or 503 for a closed store error), `store_error`,
    `reset_at_s` (when the per-minute window is empty again, epoch seconds: Anthropic's `anthropic-ratelimit-*-reset`).
  - Store errors: `on_store_error="open"` admits (logged, counted), "closed" refuses with status 503; both count in
    `limiter.store_errors` and set `limiter.store_healthy` False until a call succeeds again; an admit that failed
    is taken back in the background as a cancelled one is (the store may have run it before its answer was lost);
    `await limiter.settled()` waits for the settlements in flight;
    `await limiter.probe_store()` asks the store now (for `/ready` between requests).
- `FairQueue(capacity)`: `async with queue.slot(tenant, weight, cost_tokens, timeout_s)`, start-time fair queuing
  across tenants by tokens / weight, FIFO per tenant, `QueueTimeout` after `timeout_s`; `waiting` and `running`
  per tenant. One process: each replica shares fairly what it sends.

How limits are counted: per-minute limits are sliding logs (every admission counts for exactly 60 s from its
admission, with its settled tokens), so a limit of N admits N in any 60 s and never fires early; the per-day quota
is a fixed UTC day (tokens are charged to the day of admission).
"""

from .fair_queue import FairQueue, QueueTimeout
from .limiter import Limiter, StoreUnavailable
from .memory import MemoryLimiter
from .model import Admission, Limits

__all__ = [
    "Admission",
    "FairQueue",
    "Limiter",
    "Limits",
    "MemoryLimiter",
    "QueueTimeout",
    "RedisLimiter",
    "StoreUnavailable",
]


def __getattr__(name: str) -> type:
    """`RedisLimiter` on first use: redis-py (~0.1 CPU-s to import) loads only in a process that limits in Redis."""
    if name == "RedisLimiter":
        from .redis_limiter import RedisLimiter

        return RedisLimiter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
