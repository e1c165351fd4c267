"""Grammar-constrained decoding with xgrammar: compile (cached), then mask a batch of logits each step."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import torch
import xgrammar as xgr

from backends.base import GrammarKind
from backends.checkpoint import Checkpoint


class GrammarError(ValueError):
    """The grammar text could not be compiled."""


def tokenizer_info(checkpoint: Checkpoint, vocab_size: int) -> xgr.TokenizerInfo:
    """xgrammar's view of the vocabulary: control tokens are special (never text), eos ids stop."""
    control = set(checkpoint.control_token_ids)
    vocab = [("" if i in control else token) for i, token in enumerate(checkpoint.vocab[:vocab_size])]
    return xgr.TokenizerInfo(vocab, _vocab_type(checkpoint), vocab_size=vocab_size,
                             stop_token_ids=list(checkpoint.eos_token_ids))


def _vocab_type(checkpoint: Checkpoint) -> xgr.VocabType:
    decoder = json.loads(checkpoint.tokenizer.to_str()).get("decoder") or {}
    kinds = {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders", [])}
    if "ByteLevel" in kinds:
        return xgr.VocabType.BYTE_LEVEL
    if "ByteFallback" in kinds:
        return xgr.VocabType.BYTE_FALLBACK
    return xgr.VocabType.RAW


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
            compiled = self._compile(kind, text)
        except Exception as exc:  # xgrammar raises RuntimeError, ValueError or its own types
            raise GrammarError(f"invalid {kind}: {exc}") from exc
        finally:
            with self._lock:
                self.stats.misses += 1
                self.stats.compile_seconds += time.perf_counter() - started
        with self._lock:
            self._compiled[key] = compiled
            while len(self._compiled) > self._capacity:
                self._compiled.popitem(last=False)
        return compiled

    def _compile(self, kind: GrammarKind, text: str) -> xgr.CompiledGrammar:
        if kind == "json_schema":
            return self._compiler.compile_json_schema(text)
        if kind == "regex":
            return self._compiler.compile_regex(text)
        if kind == "ebnf":
            return self._compiler.compile_grammar(text)
        if kind == "structural_tag":
            return self._compiler.compile_structural_tag(text)
        raise GrammarError(f"unknown grammar kind {kind!r}")


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
