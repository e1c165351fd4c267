"""The bfloat16 greedy screen picks exactly the float32 logits' argmax, or hands the choice back."""

from __future__ import annotations

import pytest
import torch

from backends.worker.cpu_features import onednn_bf16_error
from backends.worker.greedy_head import GreedyHead
from backends.worker.model import _Linear

from .conftest import DEVICE, prompt_ids, submit

pytestmark = pytest.mark.skipif(
    DEVICE != "cpu" or onednn_bf16_error() is not None, reason="the screen needs oneDNN's bfloat16 on a CPU"
)
CPU = torch.device("cpu")


def _head(weight: torch.Tensor) -> GreedyHead:
    return GreedyHead(weight, _Linear(weight, torch.bfloat16, CPU))


def test_random_rows_get_the_float32_argmax_or_none():
    torch.manual_seed(0)
    weight = torch.randn(5000, 64)
    hidden = torch.randn(200, 64) * 4
    head = _head(weight)
    expected = (hidden @ weight.T).argmax(dim=1).tolist()
    chosen = [head.tokens(row.unsqueeze(0)) for row in hidden]
    assert all(c in (None, [e]) for c, e in zip(chosen, expected))
    assert chosen.count(None) == head.fallbacks < 20 and head.chosen == 200 - head.fallbacks
    assert head.tokens(hidden[:8]) in (None, expected[:8])  # several rows at once


def test_a_tie_is_handed_back():
    weight = torch.randn(100, 32)
    weight[7] = weight[3]
    head = _head(weight)
    assert head.tokens(weight[3:4] * 10) is None and head.fallbacks == 1
    assert head.tokens(torch.full((1, 32), float("nan"))) is None


def test_real_model_decode_matches_the_full_logits(model, checkpoint):
    head = model.greedy_head
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
