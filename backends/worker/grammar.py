"""Grammar-constrained decoding with xgrammar: compile (cached), then mask a batch of logits each step."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import torch
import xgrammar as xgr

from backends.base import GrammarKind
from backends.xgrammar_compile import GrammarError, compile_grammar, tokenizer_info

__all__ = ["BatchMasker", "GrammarCache", "GrammarError", "GrammarStats", "tokenizer_info"]


@dataclass
class GrammarStats:
    """Counts of the cache's lookups and the time its compilations took."""

    hits: int = 0
    misses: int = 0
    compile_seconds: float = 0.0


class GrammarCache:
    """Compiles grammars, keeping the most recently used compiled ones by their exact text."""

    def __init__(self, info: xgr.TokenizerInfo, capacity: int = 128):
        self.stats = GrammarStats()
        self._compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        self._compiled: OrderedDict[tuple[str, str], xgr.CompiledGrammar] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def compile(self, kind: GrammarKind, text: str) -> xgr.CompiledGrammar:
        """The compiled grammar for `text`; raises GrammarError with xgrammar's reason."""
        key = (kind, text)
        with self._lock:
            if key in self._compiled:
                self._compiled.move_to_end(key)
                self.stats.hits += 1
                return self._compiled[key]
        started = time.perf_counter()
        try:
            compiled = compile_grammar(self._compiler, kind, text)
        finally:
            with self._lock:
                self.stats.misses += 1
                self.stats.compile_seconds += time.perf_counter() - started
        with self._lock:
            self._compiled[key] = compiled
            while len(self._compiled) > self._capacity:
                self._compiled.popitem(last=False)
        return compiled


class BatchMasker:
    """One bitmask buffer for the whole batch: fill the constrained rows, apply them in one call."""

    def __init__(self, max_rows: int, vocab_size: int):
        self._bitmask = xgr.allocate_token_bitmask(max_rows, vocab_size)
        self._vocab_size = vocab_size

    def apply(self, logits: torch.Tensor, matchers: list[xgr.GrammarMatcher | None]) -> None:
        """Mask row i of `logits` (n, V) to what matchers[i] allows; None rows are left as they are."""
        rows = [i for i, m in enumerate(matchers) if m is not None]
        if not rows:
            return
        for i in rows:
            matchers[i].fill_next_token_bitmask(self._bitmask, i)
        bitmask = self._bitmask if logits.device.type == "cpu" else self._bitmask.to(logits.device, non_blocking=True)
        xgr.apply_token_bitmask_inplace(logits, bitmask, vocab_size=self._vocab_size, indices=rows)
