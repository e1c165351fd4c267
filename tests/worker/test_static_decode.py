"""The static-shape decode step (the CUDA graphs' forward) against the eager step, on the CPU with the real model,
and the engine running its decode steps through it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from backends.base import SamplingParams
from backends.worker.cuda_graphs import CudaGraphDecoder, check_rows, logits_mismatch
from backends.worker.engine import Engine
from backends.worker.model import LlamaModel, Segment
from backends.worker.sampling import HostCopy, RequestSampler, choose_tokens
from backends.worker.static_decode import StaticDecoder, StaticStep, batch_buckets, key_buckets, smallest_fitting

from .conftest import DEVICE, prompt_ids, submit

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village by the sea,"]


def test_buckets():
    assert batch_buckets(8) == [1, 2, 4, 8]
    assert batch_buckets(6) == [1, 2, 4, 6]
    assert batch_buckets(1) == [1]
    assert key_buckets(1024) == [32, 64, 128, 256, 512, 1024]
    assert key_buckets(100) == [32, 64, 100]
    assert key_buckets(16) == [16]
    assert [smallest_fitting([1, 2, 4], n) for n in (1, 3, 4, 5)] == [1, 4, 4, None]


def _prefill(model: LlamaModel, checkpoint, slots: list[int]) -> tuple[list[int], list[int]]:
    """Prefill PROMPTS[i] into slots[i]: each row's first generated token and its position."""
    ids = [prompt_ids(checkpoint, prompt) for prompt in PROMPTS[: len(slots)]]
    hidden = model.prefill([Segment(slot, 0, prompt) for slot, prompt in zip(slots, ids)])
    return model.logits(hidden).argmax(-1).tolist(), [len(prompt) for prompt in ids]


def _eager(model: LlamaModel, tokens: list[int], positions: list[int], first_slot: int) -> torch.Tensor:
    def column(values: list[int]) -> torch.Tensor:
        return torch.tensor(values).unsqueeze(1)

    return model.forward(column(tokens), column(positions), column(positions), first_slot, max(positions) + 1)


def _assert_same_step(static: torch.Tensor, eager: torch.Tensor) -> None:
    torch.testing.assert_close(static, eager, atol=1e-4, rtol=1e-4)
    assert static.argmax(-1).tolist() == eager.argmax(-1).tolist()


def test_static_step_equals_the_eager_step_for_mixed_positions_and_a_padded_row(model, checkpoint):
    """Three rows at different positions in the width-4 bucket (row 3 idle), three steps in a row, in two key
    buckets: the logits and greedy tokens of the eager forward (slots 0..2), and slot 3's keys untouched."""
    tokens, positions = _prefill(model, checkpoint, [0, 1, 2])
    slot3 = model.cache.keys[:, 3, :, : model.cache.context].clone()
    for _ in range(3):
        eager = _eager(model, tokens, positions, 0)
        for key_len in (32, 64):
            step = StaticStep(model, 4, key_len)
            step.load(tokens, positions, positions)
            _assert_same_step(step.forward()[:3], eager)
        tokens, positions = eager.argmax(-1).tolist(), [p + 1 for p in positions]
    assert torch.equal(model.cache.keys[:, 3, :, : model.cache.context], slot3)


def test_lone_request_in_a_high_slot_and_idle_rows_touch_no_other_slot(model, checkpoint):
    """Slot 3 alone: the eager step runs one row (first_slot 3), the static one the width-4 bucket whose rows 0..2
    idle; same logits, same new key, and slots 0..2 keep every key but their scratch column's."""
    _prefill(model, checkpoint, [0, 1, 2])
    ids = prompt_ids(checkpoint, PROMPTS[1])
    token = int(model.forward(torch.tensor([ids]), *[torch.arange(len(ids)).unsqueeze(0)] * 2, 3, len(ids)).argmax())
    eager = _eager(model, [token], [len(ids)], 3)
    new_key = model.cache.keys[:, 3, :, len(ids)].clone()
    model.cache.keys[:, 3, :, len(ids)] = 0
    context = model.cache.context
    others = (model.cache.keys[:, :3, :, :context].clone(), model.cache.values[:, :3, :, :context].clone())
    decoder = StaticDecoder(model)
    step = decoder.step(4, len(ids) + 1)
    assert (step.width, step.key_len) == (4, 32)
    static = decoder.run(step, [0, 0, 0, token], [0, 0, 0, len(ids)], [context] * 3 + [len(ids)])
    _assert_same_step(static[3:], eager)
    torch.testing.assert_close(model.cache.keys[:, 3, :, len(ids)], new_key, atol=1e-4, rtol=1e-4)
    assert torch.equal(model.cache.keys[:, :3, :, :context], others[0])
    assert torch.equal(model.cache.values[:, :3, :, :context], others[1])
    assert decoder.static_steps == 1


def test_static_decoder_has_no_step_past_its_buckets(model):
    decoder = StaticDecoder(model)
    assert decoder.step(model.cache.slots + 1, 10) is None
    assert decoder.step(1, model.cache.context + 1) is None
    assert (decoder.step(3, 33).width, decoder.step(3, 33).key_len) == (4, 64)


def test_static_steps_read_no_tensor_on_the_host(checkpoint, weights):
    """What a CUDA graph capture forbids (a host read of a device tensor: `.item()`, `bool`, `torch.equal`), a
    model on the meta device refuses too: every bucket's static step runs there, and the eager step, which
    chooses its shortcuts by reading the positions, does not. (Two layers: the ops repeat per layer.)"""
    two_layers = dataclasses.replace(weights, layers=weights.layers[:2])
    meta = LlamaModel(two_layers, checkpoint.config, slots=4, context=256, device="meta")
    decoder = StaticDecoder(meta)
    for step in decoder.steps.values():
        assert step.forward().shape == (step.width, meta.vocab_size)
    with pytest.raises(RuntimeError, match="meta tensors"):
        decoder.steps[1, 32].eager_forward()


def _run_engine(model: LlamaModel, checkpoint, decoder: StaticDecoder | None) -> tuple[list[list[int]], Engine]:
    """Three prompts at once, then a continuation of the third (the prefix cache puts it alone in its slot)."""
    engine = Engine(model, checkpoint.eos_token_ids, prefill_chunk=16, decoder=decoder)
    engine.start()
    try:
        ids = [prompt_ids(checkpoint, prompt) for prompt in PROMPTS]
        collectors = [submit(engine, f"r{i}", prompt, max_new_tokens=10) for i, prompt in enumerate(ids)]
        outputs = [collector.wait()[0] for collector in collectors]
        more = ids[2] + outputs[2] + prompt_ids(checkpoint, " And then")
        outputs.append(submit(engine, "more", more, max_new_tokens=10).wait()[0])
    finally:
        engine.stop()
    return outputs, engine


def test_engine_through_static_steps_gives_the_eager_engines_greedy_tokens(model, checkpoint):
    eager, eager_engine = _run_engine(model, checkpoint, None)
    static, static_engine = _run_engine(model, checkpoint, StaticDecoder(model))
    assert static == eager
    assert eager_engine.decode_counts()["decode_static_steps"] == 0
    counts = static_engine.decode_counts()
    assert counts["decode_static_steps"] == static_engine.stats.decode_steps > 0
    assert counts["decode_eager_steps"] == counts["decode_graph_replays"] == 0
    assert static_engine.decode_path().startswith("off")


@pytest.mark.skipif(DEVICE == "cuda", reason="capturing succeeds on CUDA: this checks a failed capture on the CPU")
def test_a_failed_capture_turns_graphs_off_and_the_engine_decodes_eagerly(model, checkpoint):
    decoder = CudaGraphDecoder(model)  # on the CPU, torch.cuda raises at the first capture call
    engine = Engine(model, checkpoint.eos_token_ids, decoder=decoder)
    engine.start()
    try:
        output, _ = submit(engine, "r", prompt_ids(checkpoint, PROMPTS[0]), max_new_tokens=4).wait()
    finally:
        engine.stop()
    assert engine.decode_path().startswith("off: capture failed")
    assert decoder.graphs == {} and decoder.step(1, 10) is None
    assert engine.decode_counts() == {"decode_graph_replays": 0, "decode_static_steps": 0, "decode_eager_steps": 3}
    assert len(output) == 4


def test_logits_mismatch_names_what_differs():
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0]])
    assert logits_mismatch(logits + 1e-5, logits) is None
    assert "greedy tokens [2, 0] != eager [1, 0]" in logits_mismatch(logits + torch.tensor([0.0, 0.0, 1.5]), logits)
    assert "logits differ by up to 0.1" in logits_mismatch(logits + torch.tensor([0.1, 0.0, 0.0]), logits)


def test_check_rows_put_each_row_at_its_own_position_within_the_bucket():
    for width, key_len in ((1, 32), (4, 32), (8, 64), (8, 8)):
        tokens, positions = check_rows(width, key_len, 49152)
        assert positions[0] == key_len - 1 and len(set(positions)) == width and min(positions) >= 0
        assert len(set(tokens)) == width and all(0 <= t < 49152 for t in tokens)


cuda_only = pytest.mark.skipif(
    DEVICE != "cuda", reason="CUDA graphs need a CUDA device (bench/gpu_check.sh runs these)"
)


@cuda_only
def test_every_bucket_is_captured_and_its_replay_equals_the_eager_step(model, checkpoint):
    decoder = CudaGraphDecoder(model)
    decoder.prepare()
    assert decoder.describe().startswith("on"), decoder.describe()
    assert len(decoder.graphs) == len(decoder.widths) * len(decoder.key_lens)
    tokens, positions = _prefill(model, checkpoint, [0, 1, 2])
    for _ in range(3):
        eager = _eager(model, tokens, positions, 0)
        step = decoder.step(3, max(positions) + 1)
        context = model.cache.context
        replayed = decoder.run(step, [*tokens, 0], [*positions, 0], [*positions, context])
        _assert_same_step(replayed[:3], eager)
        tokens, positions = eager.argmax(-1).tolist(), [p + 1 for p in positions]
    assert decoder.replays == 3


@cuda_only
def test_engine_through_cuda_graphs_gives_the_eager_engines_greedy_tokens(model, checkpoint):
    eager, _ = _run_engine(model, checkpoint, None)
    decoder = CudaGraphDecoder(model)
    graphed, engine = _run_engine(model, checkpoint, decoder)
    assert graphed == eager
    assert engine.decode_path().startswith("on")
    counts = engine.decode_counts()
    assert counts["decode_graph_replays"] == engine.stats.decode_steps > 0 and counts["decode_eager_steps"] == 0


@cuda_only
def test_pinned_host_copy_gives_the_tokens_of_the_direct_path(model):
    logits = torch.randn(4, model.vocab_size, device=model.device)
    params = [SamplingParams(4, temperature=t, seed=3) for t in (0.0, 0.8, 0.0, 1.2)]
    samplers, expected = ([RequestSampler(p, model.vocab_size) for p in params] for _ in range(2))
    host = HostCopy(model.cache.slots, model.vocab_size)
    assert choose_tokens(logits, samplers, host) == choose_tokens(logits, expected)
