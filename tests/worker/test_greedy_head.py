"""The bfloat16 greedy screen picks exactly the float32 logits' argmax, or hands the choice back: with oneDNN's
packed bfloat16 weights (AVX-512 BF16 CPUs) and with ATen's bfloat16 gemv (the AVX2-only path)."""

from __future__ import annotations

import pytest
import torch

from backends.worker import model as model_module
from backends.worker.cpu_features import onednn_bf16_error
from backends.worker.greedy_head import Bf16Gemv, GreedyHead
from backends.worker.model import _Linear

from .conftest import DEVICE, prompt_ids, submit

pytestmark = pytest.mark.skipif(DEVICE != "cpu", reason="the screen runs on CPU")
CPU = torch.device("cpu")
needs_onednn_bf16 = pytest.mark.skipif(onednn_bf16_error() is not None, reason="oneDNN packs no bfloat16 here")
SCREENS = [pytest.param("onednn", marks=needs_onednn_bf16), "aten-gemv"]


def _head(weight: torch.Tensor, screen: str) -> GreedyHead:
    if screen == "onednn":
        return GreedyHead(weight, _Linear(weight, torch.bfloat16, CPU))
    return GreedyHead(weight, Bf16Gemv(weight), max_rows=1, kernel="ATen gemv")


@pytest.mark.parametrize("screen", SCREENS)
def test_random_rows_get_the_float32_argmax_or_none(screen):
    torch.manual_seed(0)
    weight = torch.randn(5000, 64)
    hidden = torch.randn(200, 64) * 4
    head = _head(weight, screen)
    expected = (hidden @ weight.T).argmax(dim=1).tolist()
    chosen = [head.tokens(row.unsqueeze(0)) for row in hidden]
    assert all(c in (None, [e]) for c, e in zip(chosen, expected))
    assert chosen.count(None) == head.fallbacks < 20 and head.chosen == 200 - head.fallbacks
    assert head.tokens(hidden[:8]) in (None, expected[:8])  # several rows at once


def test_the_gemv_screen_leaves_calls_of_several_rows_to_the_full_logits():
    torch.manual_seed(0)
    weight = torch.randn(500, 32)
    head = _head(weight, "aten-gemv")
    assert head.tokens(torch.randn(2, 32)) is None and head.fallbacks == head.chosen == 0
    assert head.describe() == "bf16 screen (ATen gemv, steps of <= 1 row)"


def test_the_gemv_screen_is_bfloat16_with_float32_accumulation():
    """What the bound assumes of the screen: each output the bfloat16 rounding of a float32 sum of the bfloat16
    products, so within one bfloat16 rounding (2^-8) and float32 accumulation of the exact product."""
    torch.manual_seed(0)
    weight, row = torch.randn(4000, 576), torch.randn(1, 576)
    out = Bf16Gemv(weight)(row).double()
    x, w = row.bfloat16().double(), weight.bfloat16().double()
    exact, magnitude = x @ w.T, x.abs() @ w.abs().T
    assert bool(((out - exact).abs() <= (2.0**-8 + 576 * 2.0**-24) * magnitude).all())


@pytest.mark.parametrize("screen", SCREENS)
def test_a_tie_is_handed_back(screen):
    weight = torch.randn(100, 32)
    weight[7] = weight[3]
    head = _head(weight, screen)
    assert head.tokens(weight[3:4] * 10) is None and head.fallbacks == 1
    assert head.tokens(torch.full((1, 32), float("nan"))) is None


@pytest.mark.parametrize("screen", SCREENS)
def test_real_model_decode_matches_the_full_logits(model, checkpoint, weights, screen):
    head = _head(weights.lm_head, screen)
    ids = prompt_ids(checkpoint, "The capital of France is")
    positions = torch.arange(len(ids)).unsqueeze(0)
    hidden = model.hidden(torch.tensor([ids]), positions, positions, 3, len(ids))
    states = []
    for step in range(16):
        token = int(model.logits(hidden)[0].argmax())
        assert head.tokens(hidden) in (None, [token])
        states.append(hidden)
        position = torch.tensor([[len(ids) + step]])
        hidden = model.hidden(torch.tensor([[token]]), position, position, 3, len(ids) + step + 1)
    rows = torch.cat(states[::5])
    assert head.tokens(rows) in (None, model.logits(rows).argmax(dim=1).tolist())
    assert head.chosen >= 14  # the screen decided (a near tie may hand a step back)


@needs_onednn_bf16
def test_engine_uses_the_screen_for_plain_greedy_rows_only(engine, checkpoint):
    head = engine.model.greedy_head
    ids = prompt_ids(checkpoint, "Once upon a time")
    before = head.chosen + head.fallbacks
    greedy, _ = submit(engine, "screened", ids, max_new_tokens=6).wait()
    assert head.chosen + head.fallbacks >= before + 6
    before = head.chosen + head.fallbacks
    with_logprobs, _ = submit(engine, "full", ids, max_new_tokens=6, logprobs=True).wait()
    assert head.chosen + head.fallbacks == before
    assert greedy == with_logprobs


def test_the_model_builds_the_screen_its_cpu_runs(model, weights, monkeypatch):
    """An AVX2-only CPU (oneDNN refuses bfloat16, ATen's kernels are AVX2) gets the gemv screen; no AVX2: none."""
    assert model.greedy_head is None or model.greedy_head.describe() == "bf16 screen (oneDNN)"
    monkeypatch.setattr(model_module, "onednn_bf16_error", lambda: "bf16 path needs the cpu support ...")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    head = model._greedy_head(weights.lm_head)
    assert head is not None and head.describe() == "bf16 screen (ATen gemv, steps of <= 1 row)"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert model._greedy_head(weights.lm_head) is None
