"""The start-up choice between oneDNN's packed weights and ATen's GEMM for the many-row products of a prefill."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from backends.worker import prefill_gemm
from backends.worker.__main__ import parse_args
from backends.worker.model import _Linear
from backends.worker.prefill_gemm import FORCED_ATEN_FROM, PrefillGemm, aten_from, choose_prefill_gemm

CPU = torch.device("cpu")


def test_aten_takes_the_row_counts_it_clearly_wins_at_and_above():
    assert aten_from({64: (10.0, 8.5), 256: (20.0, 15.0)}) == 64
    assert aten_from({64: (10.0, 9.5), 256: (20.0, 15.0)}) == 256  # 0.95x at 64 rows: not clearly faster
    assert aten_from({64: (10.0, 5.0), 256: (20.0, 19.0)}) is None  # must win at every larger count too
    assert aten_from({64: (10.0, 12.0), 256: (20.0, 30.0)}) is None
    assert aten_from({}) is None


def test_auto_times_both_kernels_at_a_quarter_chunk_and_a_chunk_on_one_thread():
    weights = [torch.randn(48, 16), torch.randn(16, 24)]
    torch.set_num_threads(2)
    try:
        gemm = choose_prefill_gemm("auto", weights, chunk=32)
        assert torch.get_num_threads() == 2  # restored after timing on one thread
    finally:
        torch.set_num_threads(2)
    assert sorted(gemm.timings) == [8, 32]
    assert all(onednn > 0 and aten > 0 for onednn, aten in gemm.timings.values())
    assert gemm.aten_from == aten_from(gemm.timings)
    assert "8 rows: oneDNN" in gemm.describe(0.0) and "32 rows: oneDNN" in gemm.describe(0.0)


def test_the_probe_counts_the_kernels_cpu_time_not_time_off_the_cpu(monkeypatch):
    """Timed by the wall clock, a kernel whose thread lost the CPU to another process (a sleep, here) looked slow,
    and on a loaded host that made the probe give ATen the prefill for the process's life; its CPU time does not
    count the wait."""
    weights = [torch.randn(512, 256)]
    onednn = prefill_gemm._onednn

    def descheduled(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
        time.sleep(0.02)
        return onednn(x, packed)

    monkeypatch.setattr(prefill_gemm, "_onednn", descheduled)
    timings = prefill_gemm.time_products(weights, [64])
    assert timings[64][0] < 0.02, timings


def test_forced_modes_do_not_time():
    assert choose_prefill_gemm("onednn", [], chunk=256) == PrefillGemm(None, {})
    assert choose_prefill_gemm("aten", [], chunk=256) == PrefillGemm(FORCED_ATEN_FROM, {})
    assert choose_prefill_gemm("aten", [], chunk=16).aten_from == 16
    assert (
        PrefillGemm(64, {}).describe(423.4)
        == "prefill GEMM: ATen for products of >= 64 rows (+423 MB of float32 weights)"
    )
    assert parse_args([]).prefill_gemm == "auto"
    assert parse_args(["--prefill-gemm", "aten"]).prefill_gemm == "aten"


def test_a_linear_sends_products_of_many_rows_to_aten_and_few_to_onednn():
    weight = torch.randn(40, 24)
    routed = _Linear(weight, torch.float32, CPU, aten_from=4)
    packed = _Linear(weight, torch.float32, CPU)
    assert packed.plain is None and routed.plain is not None
    many, few = torch.randn(4, 24), torch.randn(3, 24)
    with torch.inference_mode():
        assert torch.equal(routed(many), F.linear(many, weight))
        assert torch.equal(routed(few), packed(few))
    assert _Linear(weight, torch.bfloat16, CPU, aten_from=4).plain is None  # float32 weights only


def test_the_default_model_keeps_no_float32_copies(model):
    assert model.plain_weight_bytes == 0
