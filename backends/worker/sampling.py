"""Choose next tokens from logits with each request's own settings and random stream."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from backends.base import SamplingParams

GREEDY_BELOW = 1e-5
"""A temperature or top_p under this samples greedily (vLLM's and SGLang's epsilon): dividing by such a temperature
overflows the logits, and such a top_p underflows in float32 and keeps no token."""


@dataclass
class TokenChoice:
    """A sampled token, with its log-probability and the top alternatives when asked for."""

    token_id: int
    logprob: float | None = None
    top: list[tuple[int, float]] = field(default_factory=list)


class RequestSampler:
    """Sampling state of one request: its settings, its generator and its output-token counts.

    Both live on the CPU whatever device the logits come from: a seeded request draws the same tokens on
    any device, and a CPU generator never meets a CUDA tensor."""

    def __init__(self, params: SamplingParams, vocab_size: int):
        self.params = params
        self.greedy = params.temperature < GREEDY_BELOW or params.top_p < GREEDY_BELOW or params.top_k == 1
        seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        self.generator = None if self.greedy else torch.Generator().manual_seed(seed)
        penalized = params.frequency_penalty != 0.0 or params.presence_penalty != 0.0
        self.counts = torch.zeros(vocab_size) if penalized else None

    def penalize(self, logits: torch.Tensor) -> None:
        """Apply frequency and presence penalties in place to this request's logits row."""
        if self.counts is not None:
            penalty = self.counts * self.params.frequency_penalty + (self.counts > 0) * self.params.presence_penalty
            logits -= penalty.to(logits.device)

    def record(self, token_id: int) -> None:
        if self.counts is not None:
            self.counts[token_id] += 1

    def sample(self, logits: torch.Tensor) -> int:
        """Draw one token from a (V,) logits row after temperature, top-k, min-p and top-p."""
        p = self.params
        scaled = logits.cpu() / p.temperature
        ids = None
        if 0 < p.top_k < scaled.numel():
            scaled, ids = torch.topk(scaled, p.top_k)
        elif p.top_p < 1.0:
            scaled, ids = torch.sort(scaled, descending=True)
        probs = torch.softmax(scaled, dim=-1)
        if p.min_p > 0.0:
            probs = probs.masked_fill(probs < p.min_p * probs.max(), 0.0)
        if p.top_p < 1.0:  # `ids` is set: probs are sorted, largest first
            before = torch.cumsum(probs, dim=-1) - probs
            probs = probs.masked_fill(before >= p.top_p * probs.sum(), 0.0)
        choice = int(torch.multinomial(probs, 1, generator=self.generator))
        return int(ids[choice]) if ids is not None else choice


class HostCopy:
    """Copies a step's argmax ids, and the logits rows to be sampled on the host, from the GPU with one wait: into
    host buffers made once, without blocking, then one event sync (where `.tolist()` and a `.cpu()` per sampled
    row each waited). Pinned buffers and a CUDA event; `pinned=False`: plain buffers and no event, for the
    logic's tests on a CPU."""

    def __init__(self, rows: int, vocab_size: int, pinned: bool = True):
        self.ids = torch.empty(rows, dtype=torch.long, pin_memory=pinned)
        self.rows = torch.empty(rows, vocab_size, pin_memory=pinned)
        self._copied = torch.cuda.Event() if pinned else None

    def fetch(self, ids: torch.Tensor, rows: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        """`ids` (n,) as a list and `rows` (k, V) as a host tensor, valid until the next fetch."""
        host_ids, host_rows = self.ids[: ids.shape[0]], self.rows[: rows.shape[0]]
        host_ids.copy_(ids, non_blocking=True)
        host_rows.copy_(rows, non_blocking=True)
        if self._copied is not None:
            self._copied.record()
            self._copied.synchronize()
        return host_ids.tolist(), host_rows


def choose_tokens(logits: torch.Tensor, samplers: list[RequestSampler], host: HostCopy | None = None) -> list[int]:
    """One token per row of `logits` (n, V); greedy rows share one argmax. `host`: how a GPU's ids and sampled
    rows reach the host (None: `.tolist()` and the rows themselves)."""
    if any(sampler.counts is not None for sampler in samplers):
        logits = logits.clone()  # the forward's output may be an inference tensor, which refuses in-place updates
        for row, sampler in enumerate(samplers):
            sampler.penalize(logits[row])
    ids = logits.argmax(dim=-1)
    sampled = [row for row, sampler in enumerate(samplers) if not sampler.greedy]
    if host is None:
        tokens, rows = ids.tolist(), {row: logits[row] for row in sampled}
    else:
        tokens, host_rows = host.fetch(ids, logits[sampled] if sampled else logits[:0])
        rows = dict(zip(sampled, host_rows))
    for row in sampled:
        tokens[row] = samplers[row].sample(rows[row])
    return tokens


def token_logprobs(logits: torch.Tensor, token_id: int, top_n: int) -> TokenChoice:
    """Log-probability of `token_id` under a (V,) logits row, and the `top_n` most likely tokens."""
    logprobs = torch.log_softmax(logits, dim=-1)
    top: list[tuple[int, float]] = []
    if top_n > 0:
        values, ids = torch.topk(logprobs, top_n)
        top = list(zip(ids.tolist(), values.tolist()))
    return TokenChoice(token_id, float(logprobs[token_id]), top)
