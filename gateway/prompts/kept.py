"""What the prompt caches keep (the kept renders, the encoder's kept prompts): values by key, least recently used out
first, shared by the event loop and the planning threads."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Kept(Generic[K, V]):
    """At most `entries` values by key, least recently used out first. Found with no lock: the OrderedDict's `get`
    and `move_to_end` are each one step under the GIL, for keys whose hashes and comparisons are builtin (str, bytes,
    int, tuples of them), and an entry evicted between the two is found all the same, just not moved; kept under a
    lock, so two keeps never evict at once."""

    def __init__(self, entries: int):
        self._entries = entries
        self._kept: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value kept under `key` (now the most recently used), or None."""
        kept = self._kept
        value = kept.get(key)
        if value is not None:
            try:
                kept.move_to_end(key)
            except KeyError:  # evicted by another thread's keep since the get
                pass
        return value

    def keep(self, key: K, value: V) -> None:
        """Keep `value` under `key`, the least recently used out past `entries`."""
        with self._lock:
            self._kept[key] = value
            while len(self._kept) > self._entries:
                self._kept.popitem(last=False)
