"""Continuous batching: one thread runs prefill chunks and decode steps; requests join between steps."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import torch

from backends.base import SamplingParams
from backends.detokenizer import Piece
from backends.worker.grammar import BatchMasker
from backends.worker.model import LlamaModel, Segment
from backends.worker.output_text import OutputText
from backends.worker.prefix_cache import PrefixCache, common_prefix
from backends.worker.sampling import HostCopy, RequestSampler, TokenChoice, choose_tokens, token_logprobs
from backends.worker.static_decode import StaticDecoder
from backends.worker.threads import ThreadTuner
from backends.xgrammar_core import xgrammar

if TYPE_CHECKING:
    import xgrammar as xgr

log = logging.getLogger(__name__)

FinishType = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class Finish:
    type: FinishType
    matched: int | str | None = None
    """The stop token id or stop string that ended the output."""
    length: int | None = None
    message: str | None = None


@dataclass
class EngineEvent:
    """What one step produced for one request: new tokens, and how it ended if it did."""

    tokens: list[TokenChoice]
    finish: Finish | None = None
    error: str | None = None
    cached_tokens: int = 0
    """Prompt tokens whose keys came from the prefix cache."""
    pieces: list[Piece] | None = None
    """The new text, for a request with `text` (stop strings); None: the receiver detokenizes `tokens`."""


@dataclass(eq=False)
class EngineRequest:
    """A validated request. `emit` is called on the engine thread and must not block."""

    rid: str
    input_ids: list[int]
    params: SamplingParams
    emit: Callable[[EngineEvent], None]
    grammar: xgr.CompiledGrammar | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    min_new_tokens: int = 0
    """Until this many tokens are out, EOS and the stop tokens cannot be sampled."""
    text: OutputText | None = None
    """Set for stop strings: the output is detokenized here and ends on the token completing one."""


@dataclass
class EngineStats:
    """Cumulative timings of the engine loop (seconds)."""

    decode_steps: int = 0
    decode_tokens: int = 0
    decode_seconds: float = 0.0
    grammar_seconds: float = 0.0
    prefill_tokens: int = 0
    prefill_seconds: float = 0.0


@dataclass(frozen=True)
class EngineLoad:
    """A snapshot of the engine's load, read from any thread (racy by a step at most)."""

    running: int
    waiting: int
    kv_cache_usage: float
    """Cached tokens over the KV cache's capacity (slots x context), 0..1."""

    def queued(self, slots: int) -> int:
        """Waiting requests that no free slot of `slots` will take: those submitted while a slot is free are on
        their way into it (the engine thread takes them at its next step), not in a queue."""
        return max(0, self.waiting - max(0, slots - self.running))

    def has_room(self, slots: int, max_waiting: int) -> bool:
        """A request submitted now goes into a free slot of `slots`, or waits behind fewer than `max_waiting`
        queued ones (0: it never waits, but a free slot still takes it)."""
        return self.running + self.waiting < slots or self.queued(slots) < max_waiting


@dataclass(eq=False)
class _Running:
    request: EngineRequest
    slot: int
    sampler: RequestSampler
    matcher: xgr.GrammarMatcher | None
    stop_ids: frozenset[int]
    reused: int = 0
    """Prompt tokens whose keys the prefix cache provided."""
    prefilled: int = 0
    generated: int = 0
    next_input: int = -1
    output_ids: list[int] = field(default_factory=list)

    @property
    def cached(self) -> int:
        """Tokens whose keys are in the cache."""
        return self.prefilled + max(self.generated - 1, 0)

    def kv_ids(self) -> list[int]:
        """The ids of the tokens whose keys are in the slot, in order."""
        return self.request.input_ids[: self.prefilled] + self.output_ids[: max(self.generated - 1, 0)]

    def shared_prefix(self, prompt: list[int], limit: int) -> int:
        """How many leading ids of `prompt` (at most `limit`) this slot holds the keys of."""
        ids = self.request.input_ids
        n = common_prefix(prompt, ids, min(limit, self.prefilled))
        if n < len(ids) or self.generated < 2:
            return n
        return n + common_prefix(prompt[n:], self.output_ids, min(limit - n, self.generated - 1))


@dataclass
class _Inbox:
    submits: queue.SimpleQueue[EngineRequest] = field(default_factory=queue.SimpleQueue)
    aborts: queue.SimpleQueue[tuple[str, str]] = field(default_factory=queue.SimpleQueue)
    wake: threading.Event = field(default_factory=threading.Event)


def _plain_greedy(running: _Running) -> bool:
    """The row's token is the argmax of its raw logits: greedy, no penalties, grammar, logprobs or stop-token
    mask (the greedy head may choose it without the full logits)."""
    request = running.request
    return (
        running.sampler.greedy
        and running.sampler.counts is None
        and running.matcher is None
        and not request.logprobs
        and (running.generated >= request.min_new_tokens or not running.stop_ids)
    )


def _hold_stop_tokens(row: torch.Tensor, stop_ids: list[int], constrained: bool) -> None:
    """Mask `stop_ids` in a logits row (min_new_tokens), unless they are all its grammar (`constrained`) still
    allows: a grammar's end wins over min_new_tokens (an all -inf row has no token to sample: NaN probabilities,
    or an argmax of 0 that the grammar rejects)."""
    kept = row[stop_ids].clone() if constrained else None
    row[stop_ids] = float("-inf")
    if kept is not None and not bool(row.isfinite().any()):
        row[stop_ids] = kept


class Engine:
    """Owns the model and its KV slots; every public method is safe to call from any thread."""

    def __init__(
        self,
        model: LlamaModel,
        eos_token_ids: list[int],
        *,
        prefill_chunk: int = 256,
        prefix_cache: bool = True,
        tuner: ThreadTuner | None = None,
        threads: int | None = None,
        decoder: StaticDecoder | None = None,
    ):
        """`tuner`: set and re-measure the engine thread's torch thread count (`--threads auto`); else `threads`,
        set on the engine thread when it starts (None: the count the starting thread has). `decoder`: runs the
        plain decode steps its buckets hold (`CudaGraphDecoder`: CUDA graphs), prepared on the engine thread when
        it starts; None: every step eager."""
        self.model = model
        self.decoder = decoder
        self.tuner = tuner
        self._threads = threads
        self.eos_token_ids = frozenset(eos_token_ids)
        self.prefill_chunk = prefill_chunk
        self.max_batch = model.cache.slots
        self.context_length = model.cache.context
        self.stats = EngineStats()
        self.prefix_cache = PrefixCache(self.max_batch, prefix_cache)
        self._inbox = _Inbox()
        self._waiting: deque[EngineRequest] = deque()
        self._slots: list[_Running | None] = [None] * self.max_batch
        self._prefilling: deque[_Running] = deque()
        self._masker = BatchMasker(self.max_batch, model.vocab_size)
        self._host = HostCopy(self.max_batch, model.vocab_size) if model.device.type == "cuda" else None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._started = threading.Event()

    def start(self) -> None:
        """Start the engine thread; returns once it has set its torch thread count."""
        self._thread.start()
        self._started.wait()

    @property
    def threads(self) -> int | None:
        """The engine thread's torch thread count now (None before it starts)."""
        return self.tuner.current if self.tuner is not None else self._threads

    def stop(self) -> None:
        self._stopping = True
        self._inbox.wake.set()
        self._thread.join()

    def submit(self, request: EngineRequest) -> None:
        self._inbox.submits.put(request)
        self._inbox.wake.set()

    def abort(self, rid: str, message: str = "aborted") -> None:
        """Cancel a request wherever it is; it ends with an abort finish."""
        self._inbox.aborts.put((rid, message))
        self._inbox.wake.set()

    def decode_path(self) -> str:
        """Whether CUDA graphs run the decode steps: "on: ..." or "off" and why."""
        return self.decoder.describe() if self.decoder is not None else "off"

    def decode_counts(self) -> dict[str, int]:
        """Decode steps so far by how they ran: replayed graphs, uncaptured static steps, the eager forward."""
        replays = self.decoder.replays if self.decoder is not None else 0
        static = self.decoder.static_steps if self.decoder is not None else 0
        return {
            "decode_graph_replays": replays,
            "decode_static_steps": static,
            "decode_eager_steps": self.stats.decode_steps - replays - static,
        }

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def active_requests(self) -> int:
        return sum(s is not None for s in self._slots) + len(self._waiting)

    def load(self) -> EngineLoad:
        running = [s for s in list(self._slots) if s is not None]
        cached = sum(r.cached for r in running)
        waiting = len(self._waiting) + self._inbox.submits.qsize()
        return EngineLoad(len(running), waiting, cached / (self.max_batch * self.context_length))

    # --- engine thread -------------------------------------------------------------------

    def _run(self) -> None:
        try:
            if self.decoder is not None:
                self.decoder.prepare()
            if self.tuner is not None:
                self.tuner.apply(self._start_up_step)
            elif self._threads is not None:
                torch.set_num_threads(self._threads)
            self._threads = torch.get_num_threads()
        finally:
            self._started.set()
        while not self._stopping:
            if not self._has_work():
                self._inbox.wake.wait()
            self._inbox.wake.clear()
            self._take_inbox()
            self._admit()
            try:
                self._prefill_chunks()
                self._decode_step()
            except Exception as exc:  # a broken step must not kill the loop: fail its requests
                log.exception("engine step failed")
                for running in self._slots:
                    if running is not None:
                        self._finish(
                            running, Finish("abort", message=f"engine error: {exc}"), error=str(exc), keep_cache=False
                        )

    def _start_up_step(self) -> None:
        """A batch-1 decode step at position 0 of slot 0, before any request (its prefill rewrites that column)."""
        zero = torch.zeros(1, 1, dtype=torch.long, device=self.model.device)
        self.model.hidden(zero, zero, zero, 0, 1)

    def _has_work(self) -> bool:
        return bool(self._waiting) or any(s is not None for s in self._slots)

    def _take_inbox(self) -> None:
        while True:
            try:
                self._waiting.append(self._inbox.submits.get_nowait())
            except queue.Empty:
                break
        while True:
            try:
                rid, message = self._inbox.aborts.get_nowait()
            except queue.Empty:
                break
            self._abort_now(rid, message)

    def _abort_now(self, rid: str, message: str) -> None:
        for request in list(self._waiting):
            if request.rid == rid:
                self._waiting.remove(request)
                request.emit(EngineEvent([], Finish("abort", message=message)))
        for running in self._slots:
            if running is not None and running.request.rid == rid:
                self._finish(running, Finish("abort", message=message))

    def _admit(self) -> None:
        while self._waiting and None in self._slots:
            request = self._waiting.popleft()
            if request.params.max_new_tokens == 0:
                request.emit(EngineEvent([], Finish("length", length=0)))
                continue
            free = [slot for slot, running in enumerate(self._slots) if running is None]
            limit = len(request.input_ids) - 1
            busy = [
                (r.slot, r.shared_prefix(request.input_ids, limit))
                for r in self._slots
                if r is not None and self.prefix_cache.enabled
            ]
            place = self.prefix_cache.place(request.input_ids, free, busy)
            if place.source is not None:
                self.model.cache.copy_prefix(place.source, place.slot, place.reused)
            stop_ids = set(request.params.stop_token_ids)
            if not request.params.ignore_eos:
                stop_ids |= self.eos_token_ids
            matcher = xgrammar().GrammarMatcher(request.grammar) if request.grammar is not None else None
            sampler = RequestSampler(request.params, self.model.vocab_size)
            running = _Running(
                request, place.slot, sampler, matcher, frozenset(stop_ids), reused=place.reused, prefilled=place.reused
            )
            self._slots[place.slot] = running
            self._prefilling.append(running)

    def _prefill_chunks(self) -> None:
        """One forward over the next prompt chunks of the prefilling requests in order, `prefill_chunk` tokens in
        all: prompts that arrive together are prefilled together (the weights read once), and their first tokens
        come out of the same step."""
        batch, segments, budget = [], [], self.prefill_chunk
        for running in self._prefilling:
            if budget == 0:
                break
            start = running.prefilled
            chunk = running.request.input_ids[start : start + budget]
            batch.append(running)
            segments.append(Segment(running.slot, start, chunk))
            budget -= len(chunk)
        if not batch:
            return
        began = time.perf_counter()
        hidden = self.model.prefill(segments)
        done = []
        for row, (running, segment) in enumerate(zip(batch, segments)):
            running.prefilled += len(segment.tokens)
            if running.prefilled == len(running.request.input_ids):
                self._prefilling.remove(running)
                done.append(row)
        self.stats.prefill_tokens += self.prefill_chunk - budget
        self.stats.prefill_seconds += time.perf_counter() - began
        if done:
            self._sample_and_emit([batch[row] for row in done], hidden[done] if len(done) < len(batch) else hidden)

    def _decode_step(self) -> None:
        decoding = [r for r in self._slots if r is not None and r.generated > 0]
        if not decoding:
            return
        began = time.perf_counter()
        top = max(r.slot for r in decoding) + 1
        key_len = max(r.cached for r in decoding) + 1
        static = self.decoder.step(top, key_len) if self.decoder is not None else None
        # the eager forward runs the contiguous range of slots from the lowest to the highest decoding one (a lone
        # request in a high slot, where the prefix cache may put it, is one row); a static step slots 0..width-1
        first = 0 if static is not None else min(r.slot for r in decoding)
        width = static.width if static is not None else top - first
        tokens = [0] * width
        positions = [0] * width
        writes = [self.model.cache.scratch_position] * width
        for r in decoding:
            tokens[r.slot - first] = r.next_input
            positions[r.slot - first] = writes[r.slot - first] = r.cached
        rows = [r.slot - first for r in decoding]
        self.stats.decode_steps += 1  # counted before the tokens go out: a finished request's reader may look at once
        self.stats.decode_tokens += len(decoding)
        if static is not None:
            logits = self.decoder.run(static, tokens, positions, writes)
            self._sample_logits(decoding, logits[rows] if len(rows) < width else logits)
        else:
            device = self.model.device
            hidden = self.model.hidden(
                torch.tensor(tokens, device=device).unsqueeze(1),
                torch.tensor(positions, device=device).unsqueeze(1),
                torch.tensor(writes, device=device).unsqueeze(1),
                first_slot=first,
                key_len=key_len,
            )
            self._sample_and_emit(decoding, hidden[rows] if len(rows) < width else hidden)
        elapsed = time.perf_counter() - began
        self.stats.decode_seconds += elapsed
        if self.tuner is not None:
            self.tuner.record(elapsed, width)

    def _sample_and_emit(self, batch: list[_Running], hidden: torch.Tensor) -> None:
        """Choose each row's next token from its final hidden state and advance it."""
        head = self.model.greedy_head
        if head is not None and all(_plain_greedy(r) for r in batch):
            tokens = head.tokens(hidden)
            if tokens is not None:
                for running, token in zip(batch, tokens):
                    self._advance(running, TokenChoice(token))
                return
        self._sample_logits(batch, self.model.logits(hidden))

    @torch.inference_mode()  # the logits are an inference tensor: masks and penalties change them in place
    def _sample_logits(self, batch: list[_Running], logits: torch.Tensor) -> None:
        """Choose each row's next token from its logits (a decode step's may be a CUDA graph's output buffer,
        rewritten by its next replay) and advance it."""
        raw = {i: logits[i].clone() for i, r in enumerate(batch) if r.request.logprobs}
        began = time.perf_counter()
        stuck = self._masker.apply(logits, [r.matcher for r in batch])
        self.stats.grammar_seconds += time.perf_counter() - began
        if stuck:  # ended alone: sampling their rows would fail the whole step, every request of the batch with it
            for row in stuck:
                self._finish(batch[row], Finish("abort", message="the grammar allows no next token"))
            live = [row for row in range(len(batch)) if row not in stuck]
            if not live:
                return
            raw = {new: raw[old] for new, old in enumerate(live) if old in raw}
            logits, batch = logits[live], [batch[row] for row in live]
        for row, running in enumerate(batch):
            if running.generated < running.request.min_new_tokens and running.stop_ids:
                _hold_stop_tokens(logits[row], list(running.stop_ids), running.matcher is not None)
        chosen = choose_tokens(logits, [r.sampler for r in batch], self._host)
        for i, (running, token) in enumerate(zip(batch, chosen)):
            choice = token_logprobs(raw[i], token, running.request.top_logprobs) if i in raw else TokenChoice(token)
            self._advance(running, choice)

    def _advance(self, running: _Running, choice: TokenChoice) -> None:
        token = choice.token_id
        running.generated += 1
        running.next_input = token
        running.output_ids.append(token)
        running.sampler.record(token)
        finish = None
        if running.matcher is not None:
            began = time.perf_counter()
            accepted = running.matcher.accept_token(token)
            self.stats.grammar_seconds += time.perf_counter() - began
            if not accepted:
                finish = Finish("abort", message=f"grammar rejected token {token}")
            elif running.matcher.is_terminated():
                finish = Finish("stop", matched=token)
        if finish is None and token in running.stop_ids:
            finish = Finish("stop", matched=token)
        text = running.request.text
        if text is not None and (finish is None or finish.type == "stop"):
            matched = text.add(token, running.generated, stop_token=finish is not None)
            if matched is not None:  # a stop string wins over the token that completed it (as in SGLang)
                finish = Finish("stop", matched=matched)
        if finish is None and running.generated >= running.request.params.max_new_tokens:
            finish = Finish("length", length=running.generated)
        if finish is None and running.cached + 1 >= self.context_length:
            finish = Finish("length", length=running.generated)
        if finish is None:
            pieces = text.take(final=False) if text is not None else None
            running.request.emit(EngineEvent([choice], cached_tokens=running.reused, pieces=pieces))
        else:
            self._finish(running, finish, tokens=[choice])

    def _finish(
        self,
        running: _Running,
        finish: Finish,
        tokens: list[TokenChoice] | None = None,
        error: str | None = None,
        keep_cache: bool = True,
    ) -> None:
        """End `running`; its slot is free and keeps its keys for the prefix cache (unless a step failed)."""
        self._slots[running.slot] = None
        if running in self._prefilling:
            self._prefilling.remove(running)
        self.prefix_cache.release(running.slot, running.kv_ids() if keep_cache else [])
        text = running.request.text
        pieces = text.take(final=True) if text is not None else None
        running.request.emit(EngineEvent(tokens or [], finish, error, running.reused, pieces))
