"""A model's backend slots as the gateway counts them without tenant policies: a request of n choices never takes
more than the slots left free, so one client's large `n` cannot take every slot from the others.

Every choice is counted while it runs. A single choice is never held back (the backend's own waiting queue, bounded,
takes it); a request of several choices starts only when all of them fit in the free slots, waiting up to
`wait_s` for them (then a 503 with retry-after). With policies, the tenants' fair queue does this instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import TypeVar

from backends.base import BackendError
from gateway.errors import invalid

T = TypeVar("T")
CHOICES_WAIT_S = 5.0
"""How long a request of several choices waits for enough free slots before its 503."""


class ChoiceSlots:
    """`capacity` choices of one model run at once (its backends' batch slots); counts the choices running."""

    def __init__(self, capacity: int, wait_s: float = CHOICES_WAIT_S):
        self.capacity = capacity
        self.running = 0
        self._wait_s = wait_s
        self._freed = asyncio.Condition()

    def check(self, choices: int, n: int | None = None) -> None:
        """400 when `choices` (`n` samples of each prompt; all of them when None) could never run together on this
        model, naming the field to lower: `n` when it alone is over the slots, else `prompt` when the prompts alone
        are, else `n` (fewer samples keep every prompt in the request)."""
        if choices <= self.capacity:
            return
        n = choices if n is None else n
        prompts = choices // n
        param = "prompt" if prompts > self.capacity >= n else "n"
        how = f" ({prompts} prompts, n={n} each)" if prompts > 1 else ""
        raise invalid(
            f"this request asks for {choices} choices{how}; this model runs at most {self.capacity} at once",
            param,
            "too_many_choices",
        )

    async def hold(self, choices: int, events: AsyncIterator[T]) -> AsyncIterator[T]:
        """`events`, once `choices` slots are counted for them (released when they end); a 503 with retry-after
        when several choices do not fit in the free slots within the wait."""
        if choices > 1:
            try:
                async with asyncio.timeout(self._wait_s), self._freed:
                    await self._freed.wait_for(lambda: self.running + choices <= self.capacity)
            except TimeoutError:
                raise BackendError(
                    f"this request's {choices} choices do not fit in the model's free slots "
                    f"({self.capacity - self.running} of {self.capacity}); try again shortly",
                    status=503,
                    retryable=True,
                    code="model_busy",
                    retry_after=1,
                ) from None
        self.running += choices
        try:
            async with aclosing(events):
                async for event in events:
                    yield event
        finally:
            self.running -= choices
            async with self._freed:
                self._freed.notify_all()
