"""Decode steps of fixed shapes, the form a CUDA graph needs: per (batch width, key length) bucket, persistent
index buffers and a forward whose ops do not depend on what those buffers hold.

A bucket of width W runs slots 0..W-1 (rows are slots: no gather of the cache). Rows without a decoding request
read token 0 at position 0 and write the KV scratch column of their own slot (`KVCache.scratch_position`), which
no query attends; a lone request in slot 3 runs in the width-4 bucket. The key length bucket K attends keys
0..K-1 of each slot under a per-row mask built in the step from the positions (`LlamaModel.hidden(static=True)`),
so a short conversation reads a short stretch of the cache.
"""

from __future__ import annotations

import torch

from backends.worker.model import LlamaModel

SMALLEST_KEY_BUCKET = 32


def batch_buckets(slots: int) -> list[int]:
    """Powers of two below `slots`, then `slots`: 8 slots -> [1, 2, 4, 8], 6 -> [1, 2, 4, 6]."""
    return _doubling(1, slots)


def key_buckets(context: int) -> list[int]:
    """Key lengths from `SMALLEST_KEY_BUCKET` doubling up to `context` (the last one `context` itself)."""
    return _doubling(min(SMALLEST_KEY_BUCKET, context), context)


def _doubling(start: int, last: int) -> list[int]:
    sizes = []
    size = start
    while size < last:
        sizes.append(size)
        size *= 2
    return [*sizes, last]


def smallest_fitting(buckets: list[int], needed: int) -> int | None:
    """The smallest of the ascending `buckets` that holds `needed`, None when none does."""
    return next((size for size in buckets if size >= needed), None)


class StaticStep:
    """The decode step of one (width, key_len) bucket over persistent input buffers on the model's device."""

    def __init__(self, model: LlamaModel, width: int, key_len: int):
        self.model = model
        self.width = width
        self.key_len = key_len
        self.inputs = torch.zeros(3, width, 1, dtype=torch.long, device=model.device)
        """Token, position and KV write column of each row, in one buffer: one host-to-device copy per step."""
        self.tokens, self.positions, self.writes = self.inputs
        self.load([], [], [])

    def load(self, tokens: list[int], positions: list[int], writes: list[int]) -> None:
        """Set the first len(tokens) rows; the rest idle (token 0 at position 0, writing the scratch column)."""
        idle = self.width - len(tokens)
        scratch = self.model.cache.scratch_position
        rows = [*tokens, *[0] * idle, *positions, *[0] * idle, *writes, *[scratch] * idle]
        self.inputs.copy_(torch.tensor(rows).view(3, self.width, 1))

    def forward(self) -> torch.Tensor:
        """The float32 logits (width, V) of the loaded rows; the new keys are written into the cache."""
        hidden = self.model.hidden(self.tokens, self.positions, self.writes, 0, self.key_len, static=True)
        return self.model.logits(hidden)

    def eager_forward(self) -> torch.Tensor:
        """The same rows through the engine's eager forward (its shortcuts chosen from the inputs): the reference
        a captured graph is checked against."""
        return self.model.forward(self.tokens, self.positions, self.writes, 0, self.key_len)


class StaticDecoder:
    """The static steps of every bucket, run uncaptured (`CudaGraphDecoder` replays captured ones)."""

    def __init__(self, model: LlamaModel):
        self.widths = batch_buckets(model.cache.slots)
        self.key_lens = key_buckets(model.cache.context)
        self.steps = {(w, k): StaticStep(model, w, k) for w in self.widths for k in self.key_lens}
        self.static_steps = 0
        """Decode steps run through an uncaptured static step."""
        self.replays = 0
        """Decode steps run by replaying a captured graph (`CudaGraphDecoder`)."""

    def prepare(self) -> None:
        """Called on the engine thread before the first request (nothing to prepare uncaptured)."""

    def describe(self) -> str:
        """Whether CUDA graphs run the steps ("on: ..." or "off: why")."""
        return "off: static steps run uncaptured"

    def step(self, top_slot: int, key_len: int) -> StaticStep | None:
        """The step of the smallest bucket holding slots 0..top_slot-1 and key_len keys, or None."""
        width, keys = smallest_fitting(self.widths, top_slot), smallest_fitting(self.key_lens, key_len)
        return self.steps.get((width, keys))

    def run(self, step: StaticStep, tokens: list[int], positions: list[int], writes: list[int]) -> torch.Tensor:
        """Load the rows and run the step: the logits (step.width, V)."""
        step.load(tokens, positions, writes)
        self.static_steps += 1
        return step.forward()
