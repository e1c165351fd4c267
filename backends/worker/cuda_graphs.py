"""CUDA graphs of the static decode steps (`static_decode.py`), one per (batch width, key length) bucket, each
checked against the eager forward before the first request: any capture error or mismatch turns them all off
(one log line) and the engine decodes eagerly.

Capture: largest bucket first, all into one shared memory pool (the smaller graphs' activations reuse what the
larger ones' freed; every graph's output stays alive, so no graph writes another's), each after a warm-up run on
the capture's side stream. Replay: the step's rows are copied into its input buffer, then the graph is launched on
the current stream, which orders it after that copy.
"""

from __future__ import annotations

import logging

import torch

from backends.worker.model import LlamaModel
from backends.worker.static_decode import StaticDecoder, StaticStep

log = logging.getLogger(__name__)

LOGITS_TOLERANCE = 1e-3
"""Relative and absolute tolerance of a first replay's logits against the eager step's."""


def logits_mismatch(replayed: torch.Tensor, eager: torch.Tensor) -> str | None:
    """Why the logits of a replay differ from the eager step's (a greedy token, or a logit beyond the tolerance),
    None when they agree."""
    replayed_tokens, eager_tokens = replayed.argmax(-1).tolist(), eager.argmax(-1).tolist()
    if replayed_tokens != eager_tokens:
        return f"greedy tokens {replayed_tokens} != eager {eager_tokens}"
    if not torch.allclose(replayed, eager, rtol=LOGITS_TOLERANCE, atol=LOGITS_TOLERANCE):
        return f"logits differ by up to {float((replayed - eager).abs().max()):.3g}"
    return None


def check_rows(width: int, key_len: int, vocab_size: int) -> tuple[list[int], list[int]]:
    """Tokens and positions for a first replay: a different token and position in every row, the first at the
    bucket's last key (with width 1, the eager step's unmasked path)."""
    stride = key_len // width
    tokens = [(1000 + 7919 * row + key_len) % vocab_size for row in range(width)]
    return tokens, [key_len - 1 - row * stride for row in range(width)]


class CudaGraphDecoder(StaticDecoder):
    """Replays the captured graph of a step's bucket; runs nothing (the engine decodes eagerly) when capture or
    the first-replay check failed."""

    def __init__(self, model: LlamaModel):
        super().__init__(model)
        self.vocab_size = model.vocab_size
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.state = "off: not captured yet"

    def prepare(self) -> None:
        """Capture every bucket's graph and check its first replay; on any error, no graphs (logged once)."""
        try:
            self._capture()
            failure = self._first_replay_failure()
        except Exception as exc:  # noqa: BLE001 - a capture error must cost the graphs, not the worker
            failure = f"capture failed: {type(exc).__name__}: {exc}"
        if failure is None:
            self.state = f"on: {len(self.graphs)} graphs, widths {self.widths} x key lengths {self.key_lens}"
            log.info("CUDA graphs %s", self.state)
            return
        self.graphs.clear()
        self.state = f"off: {failure}"
        log.warning("CUDA graphs off, decoding eagerly: %s", failure)

    def describe(self) -> str:
        return self.state

    def step(self, top_slot: int, key_len: int) -> StaticStep | None:
        return super().step(top_slot, key_len) if self.graphs else None

    def run(self, step: StaticStep, tokens: list[int], positions: list[int], writes: list[int]) -> torch.Tensor:
        graph, logits = self.graphs[step.width, step.key_len]
        step.load(tokens, positions, writes)
        graph.replay()
        self.replays += 1
        return logits

    def _capture(self) -> None:
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        for bucket in sorted(self.steps, reverse=True):
            step = self.steps[bucket]  # idle rows (its load at construction): only scratch columns are written
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    step.forward()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
                logits = step.forward()
            self.graphs[bucket] = (graph, logits)
        torch.cuda.synchronize()

    def _first_replay_failure(self) -> str | None:
        """Replay each graph on rows of its own and run the eager step on the same rows (before any request: the
        keys they write go to empty slots); the first disagreement, or None."""
        for (width, key_len), (graph, logits) in self.graphs.items():
            step = self.steps[width, key_len]
            tokens, positions = check_rows(width, key_len, self.vocab_size)
            step.load(tokens, positions, positions)
            graph.replay()
            replayed = logits.clone()
            failure = logits_mismatch(replayed, step.eager_forward())
            if failure is not None:
                return f"graph (width {width}, keys {key_len}): {failure}"
        return None
