"""Sampling on small logits rows: the settings the contract fuzz found failing in the worker (no model)."""

from __future__ import annotations

import torch

from backends.base import SamplingParams
from backends.worker.sampling import HostCopy, RequestSampler, choose_tokens

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


def test_host_copy_gives_the_tokens_of_the_direct_path():
    """The hand-off a GPU's step uses (pinned buffers there; plain ones here): the same tokens, greedy and seeded
    rows mixed, over several steps reusing its buffers."""
    logits = torch.randn(3, 5, VOCAB, generator=torch.Generator().manual_seed(0))
    settings = [SamplingParams(4, temperature=0.0), SamplingParams(4, temperature=0.9, seed=7), SamplingParams(4)]
    direct = [RequestSampler(params, VOCAB) for params in settings]
    settings[2].seed = direct[2].generator.initial_seed()
    copied = [RequestSampler(params, VOCAB) for params in settings]
    host = HostCopy(4, VOCAB, pinned=False)
    for step in logits:
        assert choose_tokens(step[:3], copied, host) == choose_tokens(step[:3], direct)
    assert choose_tokens(logits[0, :1], copied[:1], host) == [int(logits[0, 0].argmax())]
