"""Greedy tokens without the full float32 logits: a bfloat16 screen of the vocabulary, then float32 for the few
tokens that can still win, with error bounds that make the result the float32 logits' own argmax.

The tied lm_head of a small model is a large share of the weights a decode step reads (SmolLM2-135M: 113 of 540 MB
in float32). Reading it in bfloat16 halves that; the bounds below keep the chosen token exactly the one
`argmax(hidden @ W.T)` in float32 picks, and hand back None (use the full logits) when two tokens are too close
to tell apart by the bounds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_BF16_ROUNDING = 2.0**-8
"""The unit roundoff of bfloat16 (8 significand bits, round to nearest)."""
_FP32_ROUNDING = 2.0**-24


class GreedyHead:
    """The argmax over `hidden @ weight.T` (float32) for rows of final-normed hidden states.

    Screen: `approx = bf16(hidden) @ bf16(weight).T`, accumulated in float32 and rounded to bfloat16. Each of
    those three roundings moves a logit by at most u = 2^-8 of sum_i |x_i w_i|, and float32 accumulation (here
    and in the reference product) by at most K * 2^-24 of it (K: the hidden width); sum_i |x_i w_i| is at most
    |x| |w| (Cauchy-Schwarz). So with b_j = (4u + 2 K 2^-24) |x| |w_j|, the reference argmax is among the
    tokens with approx_j + b_j >= max_k (approx_k - b_k). Those are rescored in float32; the best one is
    returned when it beats every other candidate by more than both float32 products' error bounds
    (2 K 2^-24 sum_i |x_i w_i| each, that sum computed for the candidates), else None.
    """

    def __init__(self, weight: torch.Tensor, screen: object, max_rows: int | None = None, kernel: str = "oneDNN"):
        """`weight`: the float32 lm_head (vocab, hidden); `screen`: a callable computing rows @ weight.T in
        bfloat16 (a packed linear, or `Bf16Gemv`); `max_rows`: the most rows a call screens (more: None, the
        full logits); `kernel`: the screen's kernel, for the start-up line."""
        self.weight = weight
        self.screen = screen
        self.max_rows = max_rows
        self.kernel = kernel
        self.row_norms = weight.norm(dim=1)
        width = weight.shape[1]
        self._screen_error = 4 * _BF16_ROUNDING + 2 * width * _FP32_ROUNDING
        self._rescore_error = 4 * width * _FP32_ROUNDING
        self.chosen = 0
        """Rows whose token this head chose."""
        self.fallbacks = 0
        """Calls whose rows were too close to call from the bounds (the caller used the full logits)."""

    @torch.inference_mode()
    def tokens(self, hidden: torch.Tensor) -> list[int] | None:
        """The float32 argmax token of each row of `hidden` (n, hidden), or None when the caller needs the full
        float32 logits to decide (or the call has more than `max_rows` rows)."""
        if self.max_rows is not None and len(hidden) > self.max_rows:
            return None
        approx = self.screen(hidden).float()
        norms = hidden.norm(dim=1, keepdim=True)
        bound = (norms * self._screen_error) * self.row_norms
        lower = (approx - bound).amax(dim=1, keepdim=True)
        if not bool(torch.isfinite(lower).all()):
            self.fallbacks += 1
            return None
        high = approx.add_(bound)
        # with `lower` finite (no logit is NaN), high >= lower exactly where high - lower >= 0: a column is a
        # candidate of some row where the column's largest difference is; cheaper than a mask and `any` over rows
        ids = ((high - lower).amax(dim=0) >= 0).nonzero().squeeze(1)
        rows = self.weight[ids]
        exact = (hidden @ rows.T).masked_fill_(high[:, ids] < lower, float("-inf"))
        error = (hidden.abs() @ rows.abs().T).mul_(self._rescore_error)
        best = exact.argmax(dim=1, keepdim=True)
        floor = exact.gather(1, best) - error.gather(1, best)
        rivals = (exact + error).scatter(1, best, float("-inf")).amax(dim=1, keepdim=True)
        if not bool((floor > rivals).all()):
            self.fallbacks += 1
            return None
        self.chosen += len(hidden)
        return ids[best.squeeze(1)].tolist()

    def describe(self) -> str:
        rows = "" if self.max_rows is None else f", steps of <= {self.max_rows} row{'s' * (self.max_rows > 1)}"
        return f"bf16 screen ({self.kernel}{rows})"


class Bf16Gemv:
    """`rows @ weight.T` in bfloat16 through ATen's matrix-vector kernel: float32 accumulation and one bfloat16
    rounding of each output, as the bound above assumes (fast for one row; a GEMM for more)."""

    def __init__(self, weight: torch.Tensor):
        self.weight = weight.to(torch.bfloat16).contiguous()

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        return F.linear(rows.to(torch.bfloat16), self.weight)
