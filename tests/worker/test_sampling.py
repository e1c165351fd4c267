"""Sampling on small logits rows: the settings the contract fuzz found failing in the worker (no model)."""

from __future__ import annotations

import torch

from backends.base import SamplingParams
from backends.worker.sampling import RequestSampler, choose_tokens

VOCAB = 8


def _inference_logits() -> torch.Tensor:
    with torch.inference_mode():
        return torch.arange(VOCAB, dtype=torch.float32).repeat(2, 1)


def test_penalties_apply_to_the_forwards_inference_tensor():
    """Found by the fuzz: frequency_penalty on a full decode batch was a 502 ("Inplace update to inference tensor")."""
    samplers = [RequestSampler(SamplingParams(4, temperature=0.0, frequency_penalty=-1.8), VOCAB) for _ in range(2)]
    samplers[0].record(3)
    samplers[1].record(7)
    samplers[1].counts[7] = 100  # a heavily repeated token: a positive penalty would push it below the others
    samplers[1].params.frequency_penalty = 2.0
    assert choose_tokens(_inference_logits(), samplers) == [7, 6]


def test_a_vanishing_temperature_samples_greedily():
    """Found by the fuzz: temperature 1.2e-38 overflowed the logits to inf and the draw failed (a 502)."""
    sampler = RequestSampler(SamplingParams(4, temperature=1.175494351e-38), VOCAB)
    assert sampler.greedy
    assert choose_tokens(_inference_logits()[:1], [sampler]) == [VOCAB - 1]


def test_a_vanishing_top_p_samples_greedily():
    """Found by the fuzz: top_p 9e-228 is 0 in float32, so the nucleus kept no token and the draw failed (a 502)."""
    sampler = RequestSampler(SamplingParams(4, top_p=9.153859549670471e-228), VOCAB)
    assert sampler.greedy
    assert choose_tokens(_inference_logits()[:1], [sampler]) == [VOCAB - 1]
