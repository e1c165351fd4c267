"""A tenant's policy, as loaded from its file: keys, models, limits, tool rules, priority, audit."""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
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


GLOBS_CACHE = 4096
"""Lists of globs whose regex is remembered: tenants share theirs (the defaults' models, a model's globs), and a reload
after a change of `_defaults.yaml` builds every tenant's Policy again."""


@functools.lru_cache(maxsize=GLOBS_CACHE)
def globs_regex(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regex matching any of `patterns` (fnmatch globs, case-sensitive), or nothing when there is none."""
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or "(?!)")


@dataclass(frozen=True)
class Globs:
    """Names or fnmatch globs, matched case-sensitively."""

    patterns: tuple[str, ...]
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_regex", globs_regex(self.patterns))

    def match(self, name: str) -> bool:
        return self._regex.match(name) is not None


UNLIMITED = LimiterLimits()
MODEL_LIMITS_CACHE = 4096
"""Model ids whose limits a ModelLimits remembers (the registry's models: a bound, not a working set)."""


@dataclass(frozen=True)
class ModelLimits:
    """A tenant's limits per model: (glob, limits) in the file's order; a model id's limits are those of the first
    glob it matches (none: only the tenant's own apply). Each model has its own counts, even when one glob matches
    several."""

    entries: tuple[tuple[str, LimiterLimits], ...] = ()
    _patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _found: dict[str, LimiterLimits | None] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_patterns", tuple(globs_regex((g,)) for g, _ in self.entries))
        object.__setattr__(self, "_found", {})

    def for_model(self, model: str) -> LimiterLimits | None:
        """The limits of the first glob `model` matches, or None (at most 1,000 globs read, once per model id)."""
        if not self.entries:
            return None
        if model not in self._found:
            if len(self._found) >= MODEL_LIMITS_CACHE:
                self._found.clear()
            first = next((i for i, p in enumerate(self._patterns) if p.match(model)), None)
            limits = None if first is None else self.entries[first][1]
            self._found[model] = None if limits is None or limits == UNLIMITED else limits  # {}: nothing to count
        return self._found[model]


@dataclass(frozen=True)
class Policy:
    """Everything the gateway enforces for one tenant."""

    tenant: str
    keys: tuple[Key, ...]
    models: Globs
    limits: Limits = Limits()
    model_limits: ModelLimits = ModelLimits()
    """Its limits per model (`limits.models`), under its own."""
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
