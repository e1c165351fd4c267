"""Which GEMM runs the many-row products of a prefill on this CPU: oneDNN's packed float32 weights or ATen's.

oneDNN's pre-packed weights are 2-3x faster than ATen's BLAS for the few rows of a decode step, but CPUs differ
for the hundreds of rows of a prompt chunk: an AVX2-only machine measured the worker's prefill at 0.71x of
transformers' (which multiplies with ATen). So at start-up one layer's products are timed both ways at prefill
sizes, interleaved; where ATen is clearly faster, products of that many rows or more go to ATen, which needs the
float32 weights kept beside the packed ones (the start-up line says how many MB that costs).

The timings are the calling thread's CPU time, not the wall clock: on a loaded host (load 16) wall-clock timings of
the same products put ATen/oneDNN anywhere from 0.63 to 1.96 at 256 rows and gave ATen the prefill in 1 of 6
probes under the AVX2 caps (a choice kept for the process's life: there ATen's whole prefill costs 1.14-1.21x
oneDNN's CPU), where CPU time measured 1.14-1.23 in all six.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

PrefillGemmMode = Literal["auto", "onednn", "aten"]

SWITCH_MARGIN = 0.9
"""ATen takes a row count only when its best time is under this fraction of oneDNN's."""
FORCED_ATEN_FROM = 64
"""`--prefill-gemm aten`: the row count from which products go to ATen."""


@dataclass(frozen=True)
class PrefillGemm:
    """The choice: products of at least `aten_from` rows use ATen (None: oneDNN for every product)."""

    aten_from: int | None
    timings: dict[int, tuple[float, float]]
    """Probed rows -> (oneDNN seconds, ATen seconds), the best of the rounds (empty when not probed)."""

    def describe(self, plain_mb: float) -> str:
        probed = ", ".join(
            f"{rows} rows: oneDNN {d * 1e3:.1f} ms, ATen {a * 1e3:.1f} ms" for rows, (d, a) in self.timings.items()
        )
        choice = (
            "oneDNN for every product"
            if self.aten_from is None
            else f"ATen for products of >= {self.aten_from} rows (+{plain_mb:.0f} MB of float32 weights)"
        )
        return f"prefill GEMM: {choice}" + (f" (one layer at start-up: {probed})" if probed else "")


def time_products(
    weights: Sequence[torch.Tensor], rows: Sequence[int], rounds: int = 2
) -> dict[int, tuple[float, float]]:
    """The CPU seconds of multiplying `rows` rows by every weight (out, in) with oneDNN's packed weights and with
    ATen, on one thread (the kernels' own speed: several threads on a loaded host time the scheduler) whose CPU
    time is counted (time taken from it by other processes is not), each product the best of `rounds` after a
    warm-up, the two kernels alternating product by product."""
    packed = [torch.ops.mkldnn._reorder_linear_weight(w) for w in weights]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            return {n: _time_rows(weights, packed, n, rounds) for n in rows}
    finally:
        torch.set_num_threads(threads)


def _time_rows(
    weights: Sequence[torch.Tensor], packed: Sequence[torch.Tensor], rows: int, rounds: int
) -> tuple[float, float]:
    total = [0.0, 0.0]
    for weight, pack in zip(weights, packed):
        x = torch.randn(rows, weight.shape[1])
        best = [float("inf"), float("inf")]
        for round_ in range(rounds + 1):
            for k, (product, operand) in enumerate(((_onednn, pack), (F.linear, weight))):
                began = time.thread_time()
                product(x, operand)
                if round_:
                    best[k] = min(best[k], time.thread_time() - began)
        total = [total[0] + best[0], total[1] + best[1]]
    return total[0], total[1]


def _onednn(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


def aten_from(timings: dict[int, tuple[float, float]]) -> int | None:
    """The smallest probed row count from which ATen is clearly faster at it and at every larger probed count."""
    chosen = None
    for rows in sorted(timings, reverse=True):
        onednn, aten = timings[rows]
        if aten >= SWITCH_MARGIN * onednn:
            break
        chosen = rows
    return chosen


def choose_prefill_gemm(mode: PrefillGemmMode, layer_weights: Sequence[torch.Tensor], chunk: int) -> PrefillGemm:
    """`auto`: time `layer_weights` (one layer's float32 products) at a quarter of a prefill chunk and a whole one,
    and route to ATen what it clearly wins; `onednn` / `aten`: as told, without timing."""
    if mode == "onednn":
        return PrefillGemm(None, {})
    if mode == "aten":
        return PrefillGemm(min(FORCED_ATEN_FROM, chunk), {})
    timings = time_products(layer_weights, sorted({max(chunk // 4, 2), chunk}))
    return PrefillGemm(aten_from(timings), timings)
