"""Prompt-prefix affinity: remember which replica last served each long prompt prefix (its KV cache has it).

Prompts are cut into blocks of `block_tokens`; each block boundary gets a hash of the whole prefix up to it.
A bounded LRU maps those hashes to the replica that last took a prompt with that prefix, so a request
finds the replica holding its longest known prefix of at least `min_tokens` tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Generic, TypeVar

K = TypeVar("K")


class PrefixAffinity(Generic[K]):
    """Longest-known-prefix lookup from prompt ids to a replica key."""

    def __init__(self, block_tokens: int = 64, min_tokens: int = 256, capacity: int = 65536):
        self.block_tokens = block_tokens
        self.min_tokens = max(min_tokens, block_tokens)
        self.capacity = capacity
        self._owner: OrderedDict[int, K] = OrderedDict()

    def prefix_hashes(self, ids: Sequence[int]) -> list[int]:
        """Hashes of every whole-block prefix of `ids`, shortest first; none for a prompt under `min_tokens`."""
        if len(ids) < self.min_tokens:
            return []
        hashes, h = [], 0
        for end in range(self.block_tokens, len(ids) + 1, self.block_tokens):
            h = hash((h, tuple(ids[end - self.block_tokens : end])))
            hashes.append(h)
        return hashes

    def candidates(self, hashes: list[int]) -> list[K]:
        """Replicas holding a known prefix of at least `min_tokens`, longest prefix first, each once."""
        shortest = self.min_tokens // self.block_tokens - 1 + (self.min_tokens % self.block_tokens > 0)
        found: list[K] = []
        for h in reversed(hashes[shortest:]):
            owner = self._owner.get(h)
            if owner is not None and owner not in found:
                found.append(owner)
        return found

    def record(self, hashes: list[int], owner: K) -> None:
        """`owner` now holds every prefix in `hashes`."""
        for h in hashes:
            self._owner[h] = owner
            self._owner.move_to_end(h)
        while len(self._owner) > self.capacity:
            self._owner.popitem(last=False)

    def forget(self, owner: K) -> None:
        """Drop a replica that left (its cache went with it)."""
        for h in [h for h, o in self._owner.items() if o == owner]:
            del self._owner[h]
