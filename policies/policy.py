"""A tenant's policy, as loaded from its file: keys, models, limits, tool rules, priority, audit."""

from __future__ import annotations

import datetime as dt
import fnmatch
import re
from dataclasses import dataclass, field

from policies.limits import Limits as LimiterLimits

PRIORITY_WEIGHTS = {"interactive": 4, "batch": 1}
"""Shares of a model's fair queue: an interactive tenant gets four times a batch tenant's tokens."""
DEFAULT_QUEUE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Key:
    """One API key of a tenant: its id (for logs) and the hex SHA-256 of the key."""

    id: str
    sha256: str
    expires: dt.date | None = None

    def expired(self, today: dt.date) -> bool:
        return self.expires is not None and today >= self.expires


@dataclass(frozen=True)
class Limits:
    """Per-tenant limits; None: no limit of that kind."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent_requests: int | None = None
    max_tokens: int | None = None
    max_prompt_tokens: int | None = None
    tokens_per_day: int | None = None
    queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S


@dataclass(frozen=True)
class Globs:
    """Names or fnmatch globs, matched case-sensitively."""

    patterns: tuple[str, ...]
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        joined = "|".join(f"(?:{fnmatch.translate(p)})" for p in self.patterns) or "(?!)"
        object.__setattr__(self, "_regex", re.compile(joined))

    def match(self, name: str) -> bool:
        return self._regex.match(name) is not None


@dataclass(frozen=True)
class Policy:
    """Everything the gateway enforces for one tenant."""

    tenant: str
    keys: tuple[Key, ...]
    models: Globs
    limits: Limits = Limits()
    tools_allow: Globs | None = None
    """None: any tool name."""
    tools_strict: str = "client"
    priority: str = "interactive"
    audit: bool = True
    audit_prompts: bool = False
    on_store_error: str = "closed"
    metrics: bool = False
    """Whether its keys may read /metrics (every tenant's and model's series)."""
    source: str = ""
    """The file it came from."""
    limiter_limits: LimiterLimits = field(init=False, repr=False, compare=False)
    """What the limiter counts for this tenant."""

    def __post_init__(self) -> None:
        limits = LimiterLimits(
            requests_per_minute=self.limits.requests_per_minute,
            tokens_per_minute=self.limits.tokens_per_minute,
            concurrent_requests=self.limits.concurrent_requests,
            tokens_per_day=self.limits.tokens_per_day,
            on_store_error=self.on_store_error,
        )
        object.__setattr__(self, "limiter_limits", limits)

    @property
    def weight(self) -> int:
        return PRIORITY_WEIGHTS[self.priority]
