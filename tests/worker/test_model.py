"""Weights loading and the torch forward, checked on the real embedded model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from backends.checkpoint import load_checkpoint
from backends.worker.__main__ import parse_args, refuse_unsupported_dtype
from backends.worker.model import LlamaModel, RMSNorm, Segment, rope_
from backends.worker.weights import load_weights, save_hf_directory, unpermute_rope_rows

from .conftest import prompt_ids


def _llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """The layout llama.cpp's converter writes: each head's rope halves interleaved."""
    rows, cols = w.shape
    return w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def test_unpermute_inverts_llama_cpp_layout():
    w = np.arange(9 * 64 * 5, dtype=np.float32).reshape(9 * 64, 5)
    assert np.array_equal(unpermute_rope_rows(_llama_cpp_permute(w, 9), 9), w)
    # Row 1 of head 0 in the GGUF layout is the first row of the second rope half.
    assert np.array_equal(unpermute_rope_rows(w, 9)[32], w[1])


def test_weights_shapes_match_config(weights, checkpoint):
    c = checkpoint.config
    layer = weights.layers[0]
    assert len(weights.layers) == c.n_layers
    assert layer.q.shape == (c.n_heads * c.head_dim, c.hidden)
    assert layer.k.shape == (c.n_kv_heads * c.head_dim, c.hidden)
    assert layer.gate.shape == (c.ffn, c.hidden) and layer.down.shape == (c.hidden, c.ffn)
    assert weights.lm_head is weights.embedding  # tied: no output.weight in the GGUF


def _greedy(model: LlamaModel, ids: list[int], steps: int, slot: int = 0) -> list[int]:
    positions = torch.arange(len(ids)).unsqueeze(0)
    logits = model.forward(torch.tensor([ids]), positions, positions, slot, len(ids))
    out = []
    for _ in range(steps):
        token = int(logits[0].argmax())
        out.append(token)
        position = torch.tensor([[len(ids) + len(out) - 1]])
        logits = model.forward(torch.tensor([[token]]), position, position, slot, int(position) + 1)
    return out


def test_rms_norm_is_bit_identical_to_torch():
    x, weight = torch.randn(7, 576), torch.randn(576)
    assert torch.equal(RMSNorm(weight, 1e-5, torch.device("cpu"))(x), F.rms_norm(x, (576,), weight, 1e-5))


def test_rope_in_place_is_bit_identical_to_rotate_half():
    x = torch.randn(5, 12, 64)
    angles = torch.randn(5, 1, 32)
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    first, second = x.chunk(2, dim=-1)
    expected = x * cos + torch.cat([-second, first], dim=-1) * sin
    signed_sin = torch.cat([-sin[..., :32], sin[..., 32:]], -1)
    rope_(x, cos, signed_sin)
    assert torch.equal(x, expected)


def test_greedy_text_is_sensible(model, checkpoint):
    out = _greedy(model, prompt_ids(checkpoint, "The capital of France is"), 4)
    assert "Paris" in checkpoint.tokenizer.decode(out)


def test_chunked_prefill_matches_one_shot(model, checkpoint):
    ids = prompt_ids(checkpoint, "In a quiet village by the sea, the fishermen woke before dawn to mend their nets.")
    positions = torch.arange(len(ids)).unsqueeze(0)
    whole = model.forward(torch.tensor([ids]), positions, positions, 1, len(ids))
    for start in range(0, len(ids), 5):
        chunk = ids[start : start + 5]
        pos = torch.arange(start, start + len(chunk)).unsqueeze(0)
        chunked = model.forward(torch.tensor([chunk]), pos, pos, 2, start + len(chunk))
    torch.testing.assert_close(chunked, whole, atol=1e-4, rtol=1e-4)


def test_causal_prompt_at_zero_matches_the_masked_path(model, checkpoint):
    """A lone prompt at position 0 runs causal attention without a mask; two rows take the masked path."""
    ids = prompt_ids(checkpoint, "Tell me a story about a lighthouse keeper and a storm.")
    positions = torch.arange(len(ids)).unsqueeze(0)
    causal = model.forward(torch.tensor([ids]), positions, positions, 0, len(ids))
    two = positions.expand(2, -1)
    masked = model.forward(torch.tensor([ids, ids]), two, two, 1, len(ids))
    torch.testing.assert_close(masked[0], causal[0], atol=1e-4, rtol=1e-4)
    assert int(masked[0].argmax()) == int(causal[0].argmax())


def test_lone_decode_step_matches_the_batched_path(model, checkpoint):
    """A lone row's step (slice KV write, no mask) gives what the general path (scattered writes, a mask for
    an idle row writing its scratch column) gives for the same row."""
    ids = prompt_ids(checkpoint, "def fibonacci(n):")
    positions = torch.arange(len(ids)).unsqueeze(0)
    token = int(model.forward(torch.tensor([ids]), positions, positions, 0, len(ids))[0].argmax())
    step = torch.tensor([[len(ids)]])
    alone = model.forward(torch.tensor([[token]]), step, step, 0, len(ids) + 1)
    batched = model.forward(
        torch.tensor([[token], [0]]),
        torch.tensor([[len(ids)], [0]]),
        torch.tensor([[len(ids)], [model.cache.scratch_position]]),
        first_slot=0,
        key_len=len(ids) + 1,
    )
    torch.testing.assert_close(batched[0], alone[0], atol=1e-4, rtol=1e-4)
    assert int(batched[0].argmax()) == int(alone[0].argmax())


def test_decode_rows_at_different_positions_attend_as_the_multi_query_layout(model):
    """A decode step whose rows are at different positions hands SDPA its queries as a plain view (one query per
    row) with the mask: bit-identical to the (batch, q_len, ...) layout a multi-query masked forward builds."""
    c = model.config
    batch, groups, key_len = 3, c.n_heads // c.n_kv_heads, 9
    positions = torch.tensor([[8], [3], [5]])
    keys, values = model.cache.per_layer[0]
    generator = torch.Generator().manual_seed(0)
    keys[:batch, :, :key_len] = torch.randn(batch, c.n_kv_heads, key_len, c.head_dim, generator=generator)
    values[:batch, :, :key_len] = torch.randn(batch, c.n_kv_heads, key_len, c.head_dim, generator=generator)
    qkv = torch.randn(batch, c.n_heads * c.head_dim + 2 * c.n_kv_heads * c.head_dim, generator=generator)
    q = qkv[:, : c.n_heads * c.head_dim]  # strided, as the forward slices it
    attend = model._attention(positions, 0, key_len)
    layout = q.view(batch, 1, c.n_kv_heads, groups, c.head_dim).transpose(1, 2).reshape(batch, c.n_kv_heads, groups, -1)
    mask = torch.zeros(batch, 1, groups, key_len).masked_fill_(
        torch.arange(key_len) > positions.view(-1, 1, 1, 1), -torch.inf
    )
    expected = F.scaled_dot_product_attention(
        layout, keys[:batch, :, :key_len], values[:batch, :, :key_len], attn_mask=mask
    )
    assert torch.equal(
        attend(q, keys, values), expected.view(batch, c.n_kv_heads, 1, -1).transpose(1, 2).reshape(batch, -1)
    )


def test_prefill_of_several_slots_matches_each_alone(model, checkpoint):
    """Chunks of several slots in one forward (one at position 0, one continuing a cached prefix, one of a
    single token) give each chunk's hidden state and keys as its own forward does."""
    first = prompt_ids(checkpoint, "The capital of France is")
    second = prompt_ids(checkpoint, "Once upon a time, in a small village by the sea,")
    segments = [Segment(0, 0, first), Segment(2, 4, second[4:]), Segment(3, 0, second[:1])]
    model.prefill([Segment(2, 0, second[:4])])
    together = model.prefill(segments)
    keys = [model.cache.keys[:, s.slot, :, : s.start + len(s.tokens)].clone() for s in segments]
    for row, segment in enumerate(segments):
        model.cache.copy_prefix(2, 1, segment.start)
        alone = model.prefill([Segment(1, segment.start, segment.tokens)])
        torch.testing.assert_close(together[row], alone[0], atol=1e-4, rtol=1e-4)
        assert int(model.logits(together[row : row + 1]).argmax()) == int(model.logits(alone).argmax())
        cached = model.cache.keys[:, 1, :, segment.start : segment.start + len(segment.tokens)]
        torch.testing.assert_close(keys[row][:, :, segment.start :], cached, atol=1e-4, rtol=1e-4)


def test_safetensors_directory_loads_the_same_weights(tmp_path, checkpoint, weights):
    save_hf_directory(checkpoint, weights, tmp_path)
    hf = load_checkpoint(tmp_path)
    assert hf.config == checkpoint.config and not hf.is_gguf
    loaded = load_weights(hf)
    assert torch.equal(loaded.layers[3].q, weights.layers[3].q)
    assert torch.equal(loaded.layers[29].down, weights.layers[29].down)
    assert torch.equal(loaded.lm_head, weights.embedding)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_worker_without_cuda_refuses_device_cuda_in_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        refuse_unsupported_dtype(parse_args(["--device", "cuda"]))
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        f"[worker] error: --device cuda: this torch ({torch.__version__}) sees no CUDA device. Use --device cpu.\n"
    )
