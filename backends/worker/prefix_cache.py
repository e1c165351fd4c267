"""The prefix cache over the KV slots: a finished sequence's keys stay in its slot, indexed by its token ids.

The KV cache is one pre-allocated row per slot, so the cache is per slot too: a free slot keeps the ids
of the tokens whose keys it holds until a new request needs the slot. A new request takes, in order,
a free slot holding a prefix of its prompt (nothing is lost: the agent turn that extends the last one),
an empty slot, or the least recently used free slot (evicted). The longest prefix any slot holds
(free or running) is then reused: in place when it is in the chosen slot, else copied into it, and
only the rest of the prompt is prefilled. At least the prompt's last token is always prefilled, since
its logits choose the first output token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

_BLOCK = 256
"""Token ids compared per list slice when measuring a common prefix (slices compare in C)."""


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int | None = None) -> int:
    """How many leading ids `a` and `b` share, at most `limit`."""
    n = min(len(a), len(b), len(a) if limit is None else limit)
    start = 0
    while start < n:
        end = min(start + _BLOCK, n)
        if a[start:end] != b[start:end]:
            return next(i for i in range(start, end) if a[i] != b[i])
        start = end
    return n


@dataclass(frozen=True)
class Placement:
    """Where a new request goes: its slot, how many prompt tokens are reused, and the slot they come from."""

    slot: int
    reused: int = 0
    source: int | None = None
    """The slot to copy the reused keys from; None when they are already in `slot` (or nothing is reused)."""


class PrefixCache:
    """Which slot a new request takes and how much of its prompt the KV cache already holds."""

    def __init__(self, slots: int, enabled: bool = True):
        self.enabled = enabled
        self._held: list[list[int]] = [[] for _ in range(slots)]  # token ids whose keys a free slot holds
        self._last_used = [0] * slots
        self._clock = 0
        self.queries = 0
        """Prompt tokens looked up (vLLM's prefix_cache_queries)."""
        self.hits = 0
        """Prompt tokens found cached (vLLM's prefix_cache_hits)."""

    def place(self, prompt: Sequence[int], free: Sequence[int], running: Sequence[tuple[int, int]]) -> Placement:
        """Choose a free slot for `prompt`; `running` lists (slot, prompt tokens its keys already hold)."""
        if not self.enabled:
            self._held[free[0]] = []
            return Placement(free[0])
        limit = len(prompt) - 1
        held = {slot: common_prefix(prompt, self._held[slot], limit) for slot in free}
        extends = [s for s in free if self._held[s] and common_prefix(prompt, self._held[s]) == len(self._held[s])]
        if extends:
            slot = max(extends, key=held.__getitem__)
        else:
            empty = [s for s in free if not self._held[s]]
            slot = empty[0] if empty else min(free, key=self._last_used.__getitem__)
        # The longest prefix anywhere; the chosen slot's own wins ties (no copy).
        sources = [(held[slot], 1, slot), *((n, 0, s) for s, n in held.items()), *((n, 0, s) for s, n in running)]
        reused, _, source = max(sources)
        self.queries += len(prompt)
        self.hits += reused
        self._touch(slot)
        if source != slot and reused:
            self._touch(source)
        self._held[slot] = []
        return Placement(slot, reused, source if source != slot and reused else None)

    def release(self, slot: int, held: list[int]) -> None:
        """`slot` is free again and its keys are those of `held` (empty: nothing usable)."""
        self._held[slot] = held if self.enabled else []
        self._touch(slot)

    def held_tokens(self) -> int:
        """Tokens kept in free slots for later requests."""
        return sum(len(h) for h in self._held)

    def _touch(self, slot: int) -> None:
        self._clock += 1
        self._last_used[slot] = self._clock
