"""The policy gate of `gateway serve --policies DIR`: the store loaded from DIR, a limiter in memory or
in Redis, a fair queue per model whose backend slots are known, and the audit log."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from gateway.api.tenancy import PolicyGate
from gateway.observability.whole_lines import WholeLines
from gateway.process.config import GatewayConfig, ModelEntry
from policies import limits
from policies.audit import AuditLog
from policies.limits import FairQueue, Limiter, MemoryLimiter
from policies.store import PolicyStore


def policy_gate(
    directory: Path,
    redis_url: str | None,
    audit_path: Path | None,
    config: GatewayConfig,
    redis_options: Mapping[str, float | str] | None = None,
    group_lock: Path | None = None,
    process: tuple[int, int] = (0, 1),
) -> PolicyGate:
    """Load the policies (a bad file is logged and skipped, as on every reload) and build the gate; `redis_options`
    (`timeout_s`, `password`) go to the Redis limiter; audit lines go to `audit_path`, else stdout (`group_lock`: the lock of a
    group's processes for long lines, whole_lines.py); `process`: this process's index in its group, and their count
    (each fair queue holds this process's share of the model's slots)."""
    store = PolicyStore(directory)
    store.reload()
    limiter: Limiter = limits.RedisLimiter(redis_url, **(redis_options or {})) if redis_url else MemoryLimiter()
    queues = {m.id: FairQueue(slots) for m in config.models if (slots := backend_slots(m, *process))}
    out = WholeLines.append_to(audit_path) if audit_path else WholeLines(sys.stdout, group_lock)
    return PolicyGate(store, limiter, queues, AuditLog(out), redis_url)


def backend_slots(entry: ModelEntry, process: int = 0, processes: int = 1) -> int | None:
    """How many choices this process sends to the model's backends at once: its share of what they run at once
    (`max_running`, else a bundled worker's batch; None: unknown), divided exactly among a group's `processes`
    (`--workers`): process `process` gets the quotient, and one more while the remainder lasts."""
    total = entry.gateway_slots()
    return None if total is None else total // processes + (process < total % processes)
