"""A circuit breaker per replica: failures open it, a single trial request after a cool-down closes it."""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import Enum


class BreakerState(Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


_CLOSED, _OPEN, _HALF_OPEN = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN
"""The states as module names: Python 3.11's Enum class has a `__getattr__`, which makes every `BreakerState.X` a
slow attribute lookup (~500 instructions; a request checks and claims its replica's breaker several times)."""


class CircuitBreaker:
    """Closed until `threshold` failures in a row; then open for `cooldown_s` (doubling on each failed trial,
    up to `max_cooldown_s`); then half-open: one trial request, whose outcome closes or re-opens it."""

    def __init__(
        self,
        threshold: int = 3,
        cooldown_s: float = 2.0,
        max_cooldown_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.threshold = threshold
        self.base_cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self._clock = clock
        self._failures = 0
        self._cooldown_s = cooldown_s
        self._opened_at = 0.0
        self._state = _CLOSED
        self._trial_out = False

    @property
    def state(self) -> BreakerState:
        return self._state

    def available(self) -> bool:
        """Whether a request may go through now (does not claim the half-open trial)."""
        if self._state is _CLOSED:
            return True
        if self._state is _OPEN:
            return self._clock() >= self._opened_at + self._cooldown_s
        return not self._trial_out

    def acquire(self) -> None:
        """Claim a request slot; past the cool-down the first request becomes the half-open trial."""
        if self._state is _OPEN and self.available():
            self._state = _HALF_OPEN
        if self._state is _HALF_OPEN:
            self._trial_out = True

    def succeeded(self) -> None:
        self._failures = 0
        self._cooldown_s = self.base_cooldown_s
        self._state = _CLOSED
        self._trial_out = False

    def failed(self) -> None:
        self._failures += 1
        if self._state is _HALF_OPEN:
            self._cooldown_s = min(self._cooldown_s * 2, self.max_cooldown_s)
            self._open()
        elif self._state is _CLOSED and self._failures >= self.threshold:
            self._open()

    def released(self) -> None:
        """The request ended with no verdict (the client left): free the trial slot."""
        self._trial_out = False

    def retry_in(self) -> float:
        """Seconds until a request may go through again (0 when it may now)."""
        if self._state is not _OPEN:
            return 0.0
        return max(0.0, self._opened_at + self._cooldown_s - self._clock())

    def _open(self) -> None:
        self._state = _OPEN
        self._opened_at = self._clock()
        self._trial_out = False
