"""A pure-torch Llama forward over a pre-allocated, slot-indexed KV cache."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F

from backends.checkpoint import ModelConfig
from backends.worker.weights import LlamaWeights

WeightsDtype = Literal["fp32", "bf16"]
_TORCH_DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}


class KVCache:
    """Keys and values for `slots` sequences of up to `context` tokens, allocated once.

    Each slot has one extra scratch column (index `context`) that rows without work write into,
    so a decode step can always run over a contiguous range of slots.
    """

    def __init__(self, config: ModelConfig, slots: int, context: int, device: torch.device):
        shape = (config.n_layers, slots, config.n_kv_heads, context + 1, config.head_dim)
        self.keys = torch.empty(shape, dtype=torch.float32, device=device)
        self.values = torch.empty(shape, dtype=torch.float32, device=device)
        self.slots = slots
        self.context = context

    @property
    def scratch_position(self) -> int:
        return self.context

    def copy_prefix(self, source: int, target: int, length: int) -> None:
        """Copy the keys and values of positions 0..length-1 from slot `source` to slot `target`."""
        self.keys[:, target, :, :length] = self.keys[:, source, :, :length]
        self.values[:, target, :, :length] = self.values[:, source, :, :length]


class _Linear:
    """`x @ W.T` with float32 output. On CPU the weight is pre-packed for oneDNN, which is 2-3x
    faster than the BLAS path for the few-row products of decoding."""

    def __init__(self, weight: torch.Tensor, dtype: torch.dtype, device: torch.device):
        weight = weight.to(device=device, dtype=dtype).contiguous()
        self.out_features, self.dtype = weight.shape[0], dtype
        self.packed = device.type == "cpu" and torch.backends.mkldnn.is_available()
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight) if self.packed else weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).to(self.dtype)
        if self.packed:
            out = torch.ops.mkldnn._linear_pointwise(rows, self.weight, None, "none", [], "")
        else:
            out = F.linear(rows, self.weight)
        return out.float().view(*x.shape[:-1], self.out_features)


class _Layer:
    """Fused, device-resident weights of one block."""

    def __init__(self, w, dtype: torch.dtype, device: torch.device):
        self.attn_norm = w.attn_norm.to(device)
        self.ffn_norm = w.ffn_norm.to(device)
        self.qkv = _Linear(torch.cat([w.q, w.k, w.v]), dtype, device)
        self.o = _Linear(w.o, dtype, device)
        self.gate_up = _Linear(torch.cat([w.gate, w.up]), dtype, device)
        self.down = _Linear(w.down, dtype, device)


class LlamaModel:
    """Llama decoder: RMSNorm, RoPE, grouped-query attention, SwiGLU; float32 activations."""

    def __init__(
        self,
        weights: LlamaWeights,
        config: ModelConfig,
        *,
        slots: int,
        context: int,
        device: str | torch.device = "cpu",
        weights_dtype: WeightsDtype = "fp32",
    ):
        self.config = config
        self.device = torch.device(device)
        self.matmul_dtype = _TORCH_DTYPES[weights_dtype]
        self.layers = [_Layer(w, self.matmul_dtype, self.device) for w in weights.layers]
        self.embedding = weights.embedding.to(self.device)
        self.final_norm = weights.final_norm.to(self.device)
        self.lm_head = _Linear(weights.lm_head, self.matmul_dtype, self.device)
        self.cache = KVCache(config, slots, context, self.device)
        self.cos, self.sin = _rope_tables(config, context + 1, self.device)
        self.vocab_size = self.lm_head.out_features
        self._q_width = config.n_heads * config.head_dim
        self._kv_width = config.n_kv_heads * config.head_dim

    @torch.inference_mode()
    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        write_positions: torch.Tensor,
        first_slot: int,
        key_len: int,
        all_logits: bool = False,
    ) -> torch.Tensor:
        """Run `tokens` (B, Q) of slots first_slot..first_slot+B-1 and return float32 logits.

        `positions` (B, Q) are the rope positions and the last key each query may see;
        `write_positions` (B, Q) are the cache columns the new keys go to (the scratch column
        for idle rows). Keys 0..key_len-1 of each slot are attended. Returns logits of the
        last query of each row (B, V), or of every query (B, Q, V) with `all_logits`. The three index
        tensors may be on any device.
        """
        c = self.config
        tokens, positions, write_positions = (t.to(self.device) for t in (tokens, positions, write_positions))
        batch, q_len = tokens.shape
        groups = c.n_heads // c.n_kv_heads
        cos = self.cos[positions].unsqueeze(2)
        sin = self.sin[positions].unsqueeze(2)
        mask = _attention_mask(positions, key_len, groups)
        write = self._kv_writer(write_positions, first_slot)
        h = F.embedding(tokens, self.embedding)
        for index, layer in enumerate(self.layers):
            x = F.rms_norm(h, (c.hidden,), layer.attn_norm, c.rms_eps)
            qkv = layer.qkv(x)
            qk = qkv[..., : self._q_width + self._kv_width].view(batch, q_len, c.n_heads + c.n_kv_heads, c.head_dim)
            qk = qk * cos + _rotate_half(qk) * sin
            q, k = qk.split([c.n_heads, c.n_kv_heads], dim=2)
            v = qkv[..., self._q_width + self._kv_width :].view(batch, q_len, c.n_kv_heads, c.head_dim)
            cache_k, cache_v = self.cache.keys[index], self.cache.values[index]
            write(cache_k, k)
            write(cache_v, v)
            # Query heads sharing a KV head become extra query rows of that head: no KV repeat.
            q = q.reshape(batch, q_len, c.n_kv_heads, groups, c.head_dim).transpose(1, 2)
            q = q.reshape(batch, c.n_kv_heads, q_len * groups, c.head_dim)
            attn = F.scaled_dot_product_attention(
                q,
                cache_k[first_slot : first_slot + batch, :, :key_len],
                cache_v[first_slot : first_slot + batch, :, :key_len],
                attn_mask=mask,
            )
            attn = attn.view(batch, c.n_kv_heads, q_len, groups * c.head_dim).transpose(1, 2)
            h = h + layer.o(attn.reshape(batch, q_len, self._q_width))
            x = F.rms_norm(h, (c.hidden,), layer.ffn_norm, c.rms_eps)
            gate, up = layer.gate_up(x).chunk(2, dim=-1)
            h = h + layer.down(F.silu(gate) * up)
        if not all_logits:
            h = h[:, -1]
        return self.lm_head(F.rms_norm(h, (c.hidden,), self.final_norm, c.rms_eps))

    def _kv_writer(
        self, write_positions: torch.Tensor, first_slot: int
    ) -> Callable[[torch.Tensor, torch.Tensor], None]:
        """How this forward stores its new keys (B, Q, H, D) into one layer's cache (slots, H, columns, D).

        One row writing consecutive columns (a prefill chunk, a lone decode step) is a slice copy on CPU,
        several times cheaper per layer than the scattered write the general case needs."""
        batch, q_len = write_positions.shape
        if batch == 1 and self.device.type == "cpu":
            start = int(write_positions[0, 0])
            if q_len == 1 or torch.equal(write_positions[0], torch.arange(start, start + q_len)):
                return lambda cache, new: cache[first_slot, :, start : start + q_len].copy_(new[0].transpose(0, 1))
        rows = torch.arange(first_slot, first_slot + batch, device=self.device).unsqueeze(1).expand(batch, q_len)

        def scatter(cache: torch.Tensor, new: torch.Tensor) -> None:
            cache[rows, :, write_positions] = new

        return scatter


def _attention_mask(positions: torch.Tensor, key_len: int, groups: int) -> torch.Tensor | None:
    """The additive mask (B, 1, Q*groups, key_len) letting each query see keys up to its position, or None
    when every query sees all `key_len` keys (a decode step whose rows are all at the same position).

    Built once per forward as 0 / -inf, the form attention turns a boolean mask into in every layer."""
    if positions.shape[1] == 1 and bool((positions == key_len - 1).all()):
        return None
    keys_seen = torch.arange(key_len, device=positions.device)
    visible = (keys_seen <= positions.unsqueeze(-1)).repeat_interleave(groups, dim=1).unsqueeze(1)
    return torch.zeros(visible.shape, device=positions.device).masked_fill_(~visible, float("-inf"))


def _rope_tables(config: ModelConfig, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    half = config.head_dim // 2
    inv_freq = 1.0 / (config.rope_base ** (torch.arange(half, dtype=torch.float32) / half))
    angles = torch.outer(torch.arange(length, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float().to(device), angles.sin().float().to(device)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)
