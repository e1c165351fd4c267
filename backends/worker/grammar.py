"""Grammar-constrained decoding with xgrammar: compile (cached; under a CPU-time budget in a child process), then
mask a batch of logits each step."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from backends.base import Grammar, GrammarKind
from backends.compile_pool import Cancelled, CompilePool, CompilerUnavailable, OverBudget
from backends.compile_process import grammar_key
from backends.xgrammar_compile import GrammarError, compile_grammar, tokenizer_info
from backends.xgrammar_core import xgrammar

if TYPE_CHECKING:
    import xgrammar as xgr

__all__ = [
    "BatchMasker",
    "Cancelled",
    "CompilerFailed",
    "GrammarCache",
    "GrammarError",
    "GrammarStats",
    "GrammarTooComplex",
    "tokenizer_info",
]


class GrammarTooComplex(GrammarError):
    """The grammar costs more CPU time or memory to compile than the worker's budget."""


class CompilerFailed(Exception):
    """The compile child died or stuck, or the worker is shutting down: the client may try again."""


@dataclass
class GrammarStats:
    """Counts of the cache's lookups and the time its compilations took."""

    hits: int = 0
    misses: int = 0
    compile_seconds: float = 0.0


CACHED_BYTES = 256 * 1024 * 1024
"""What the compiled grammars kept may weigh together (xgrammar's memory_size_bytes): one compiled within the
budget can weigh tens of MB (an enum of 15,000 strings: 54 MB in 1.2 CPU-s), so a count alone bounds nothing."""


class GrammarCache:
    """Compiles grammars, keeping the most recently used compiled ones by their exact text (at most `capacity` of
    them, `capacity_bytes` together, the newest always). With `budget_s` a miss is first compiled in a child process
    (backends/compile_pool.py, as the gateway's) killed past that many CPU seconds: GrammarTooComplex, and a repeat
    of that grammar is refused at once; once the child compiled it within the budget, it is compiled here (the
    compiled grammar cannot travel: its JSON can be hundreds of times its size). Without a budget it compiles here
    only."""

    def __init__(
        self,
        info: xgr.TokenizerInfo,
        capacity: int = 128,
        budget_s: float | None = None,
        capacity_bytes: int = CACHED_BYTES,
    ):
        self.stats = GrammarStats()
        self._compiler = xgrammar().GrammarCompiler(info, cache_enabled=False)
        self._pool = None if budget_s is None else CompilePool(_given, lambda: info, budget_s)
        self._compiled: OrderedDict[tuple[str, str], tuple[xgr.CompiledGrammar, int]] = OrderedDict()
        self._capacity = capacity
        self._capacity_bytes = capacity_bytes
        self._bytes = 0
        self._lock = threading.Lock()

    def compile(self, kind: GrammarKind, text: str, cancel: threading.Event | None = None) -> xgr.CompiledGrammar:
        """The compiled grammar for `text`; blocking. GrammarError with xgrammar's reason, GrammarTooComplex past the
        budget, Cancelled once `cancel` is set during a budgeted compile, CompilerFailed when the child failed."""
        key = (kind, text)
        with self._lock:
            if key in self._compiled:
                self._compiled.move_to_end(key)
                self.stats.hits += 1
                return self._compiled[key][0]
        started = time.perf_counter()
        try:
            if self._pool is not None:
                self._check_in_child(Grammar(kind, text), cancel)
            compiled = compile_grammar(self._compiler, kind, text)
        finally:
            with self._lock:
                self.stats.misses += 1
                self.stats.compile_seconds += time.perf_counter() - started
        self._keep(key, compiled)
        return compiled

    def _keep(self, key: tuple[str, str], compiled: xgr.CompiledGrammar) -> None:
        size = compiled.memory_size_bytes
        with self._lock:
            if key in self._compiled:  # compiled meanwhile by another request
                return
            self._compiled[key] = (compiled, size)
            self._bytes += size
            while len(self._compiled) > 1 and (
                len(self._compiled) > self._capacity or self._bytes > self._capacity_bytes
            ):
                self._bytes -= self._compiled.popitem(last=False)[1][1]

    def _check_in_child(self, grammar: Grammar, cancel: threading.Event | None) -> None:
        """The grammar compiled in a child under the budget; raises when it is over it, uncompilable or cancelled."""
        try:  # the grammar comes built: its own key is the job's
            reply, _ = self._pool.job(grammar, key=grammar_key(grammar), cancel=cancel)
        except OverBudget:
            raise self._too_complex(grammar) from None
        except CompilerUnavailable as exc:
            raise CompilerFailed(exc.message) from None
        if reply[0] == "over_budget":
            raise self._too_complex(grammar)
        if reply[0] == "uncompilable":
            raise GrammarError(reply[2])

    def _too_complex(self, grammar: Grammar) -> GrammarTooComplex:
        return GrammarTooComplex(
            f"the {grammar.kind} costs more than this worker's grammar compile budget of {self._pool.seconds:g} s "
            f"of CPU and {self._pool.memory_mib} MiB of memory; simplify it (large enums, nested anyOf, long "
            "repetitions)"
        )

    def close(self) -> None:
        """Kill the compile children, if any."""
        if self._pool is not None:
            self._pool.close()


def _given(grammar: Grammar) -> Grammar:
    """The compile child's build step: the worker's grammars come built."""
    return grammar


class BatchMasker:
    """One bitmask buffer for the whole batch: fill the constrained rows, apply them in one call."""

    def __init__(self, max_rows: int, vocab_size: int):
        xgr = xgrammar()
        self._apply_bitmask = xgr.apply_token_bitmask_inplace
        self._bitmask = xgr.allocate_token_bitmask(max_rows, vocab_size)
        self._vocab_size = vocab_size
        tail = vocab_size % 32
        self._last_word_bits = (1 << tail) - 1 if tail else -1
        """The last word's bits that stand for tokens (the rest lie past the vocabulary): -1 (all) for a whole word."""

    def apply(self, logits: torch.Tensor, matchers: list[xgr.GrammarMatcher | None]) -> list[int]:
        """Mask row i of `logits` (n, V) to what matchers[i] allows; None rows are left as they are. The rows whose
        grammar allows no token at all (one that can neither go on nor end, such as `root ::= root`): nothing there
        can be sampled (an all -inf row: NaN probabilities). Read from the bitmask on the host, never from the
        logits: on CUDA that would wait for the device at every grammar step."""
        rows = [i for i, m in enumerate(matchers) if m is not None]
        if not rows:
            return []
        for i in rows:
            matchers[i].fill_next_token_bitmask(self._bitmask, i)
        stuck = self._allowing_none(rows)
        bitmask = self._bitmask if logits.device.type == "cpu" else self._bitmask.to(logits.device, non_blocking=True)
        self._apply_bitmask(logits, bitmask, vocab_size=self._vocab_size, indices=rows)
        return stuck

    def _allowing_none(self, rows: list[int]) -> list[int]:
        """The rows among `rows` whose bitmask allows no token of the vocabulary."""
        words = self._bitmask[rows]  # a copy: the buffer itself is what the logits are masked with
        words[:, -1] &= self._last_word_bits
        allowed = words.ne(0).any(dim=1).tolist()
        return [i for i, some in zip(rows, allowed) if not some]
