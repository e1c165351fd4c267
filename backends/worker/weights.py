"""Read Llama weights from a GGUF file or a Hugging Face safetensors directory as float32 tensors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from backends.checkpoint import Checkpoint, ModelConfig, gguf_cache_folder, write_hf_metadata
from backends.conversion_cache import read_cached, write_cached


@dataclass
class LayerWeights:
    """One decoder block; matrices are (out_features, in_features), Q/K in Hugging Face rope layout."""

    attn_norm: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    ffn_norm: torch.Tensor
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor


@dataclass
class LlamaWeights:
    embedding: torch.Tensor
    layers: list[LayerWeights]
    final_norm: torch.Tensor
    lm_head: torch.Tensor
    """The same tensor as `embedding` when the model ties them."""


_LAYER_FIELDS = ("attn_norm", "q", "k", "v", "o", "ffn_norm", "gate", "up", "down")
_GGUF_LAYER_NAMES = dict(
    zip(
        _LAYER_FIELDS,
        (
            "attn_norm",
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_norm",
            "ffn_gate",
            "ffn_up",
            "ffn_down",
        ),
    )
)
_HF_LAYER_NAMES = dict(
    zip(
        _LAYER_FIELDS,
        (
            "input_layernorm",
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "post_attention_layernorm",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        ),
    )
)


def unpermute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's interleaved rope layout of a Q or K projection (rows grouped per head)."""
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def load_weights(checkpoint: Checkpoint, progress: Callable[[str], None] = lambda _: None) -> LlamaWeights:
    """Load every tensor of the checkpoint as float32 on the CPU."""
    if checkpoint.config.architecture != "llama" or not checkpoint.config.n_layers:
        raise ValueError(
            f"{checkpoint.path}: architecture {checkpoint.config.architecture!r} cannot run on the bundled worker "
            "(Llama only); serve it through SGLang or vLLM"
        )
    if checkpoint.is_gguf:
        return _load_gguf_cached(checkpoint.path, checkpoint.config, progress)
    return _load_safetensors(checkpoint.path, checkpoint.config, progress)


_CACHED_WEIGHTS = "model.safetensors"
CACHED_WEIGHTS_LIMIT_BYTES = 1 << 30
"""The largest float32 copy of a GGUF's weights kept on disk (the embedded model's is ~540 MB; a 7B's would be 28 GB)."""


def _load_gguf_cached(path: Path, config: ModelConfig, progress: Callable[[str], None]) -> LlamaWeights:
    """A GGUF's weights from the float32 copy the cache keeps of them (backends/conversion_cache.py), else
    dequantized from the file and then kept, when they are small enough."""
    folder = gguf_cache_folder(path, "float32 weights", __file__)
    cached = read_cached(folder, _CACHED_WEIGHTS, lambda p: _load_safetensors(p.parent, config, progress))
    if cached is not None:
        return cached
    weights = _load_gguf(path, config, progress)
    tensors = _hf_tensors(config, weights)
    if sum(t.numel() * t.element_size() for t in tensors.values()) <= CACHED_WEIGHTS_LIMIT_BYTES:
        from safetensors.torch import save_file

        write_cached(folder, _CACHED_WEIGHTS, lambda p: save_file(tensors, str(p)))
    return weights


def _assemble(
    get: Callable[[str], torch.Tensor],
    names: dict[str, str],
    prefix: Callable[[int], str],
    config: ModelConfig,
    top: tuple[str, str, str | None],
    progress: Callable[[str], None],
) -> LlamaWeights:
    embed_name, norm_name, head_name = top
    layers = []
    for i in range(config.n_layers):
        layers.append(LayerWeights(**{f: get(f"{prefix(i)}{names[f]}.weight") for f in _LAYER_FIELDS}))
        if (i + 1) % 10 == 0 or i + 1 == config.n_layers:
            progress(f"loaded {i + 1}/{config.n_layers} layers")
    embedding = get(embed_name)
    lm_head = embedding if config.tied_embeddings or head_name is None else get(head_name)
    return LlamaWeights(embedding=embedding, layers=layers, final_norm=get(norm_name), lm_head=lm_head)


def _load_gguf(path: Path, config: ModelConfig, progress: Callable[[str], None]) -> LlamaWeights:
    import gguf

    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}

    def get(name: str) -> torch.Tensor:
        t = tensors[name]
        w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        if name.endswith("attn_q.weight"):
            w = unpermute_rope_rows(w, config.n_heads)
        elif name.endswith("attn_k.weight"):
            w = unpermute_rope_rows(w, config.n_kv_heads)
        return torch.from_numpy(np.array(w, dtype=np.float32, order="C"))

    head = "output.weight" if "output.weight" in tensors else None
    return _assemble(
        get,
        _GGUF_LAYER_NAMES,
        lambda i: f"blk.{i}.",
        config,
        ("token_embd.weight", "output_norm.weight", head),
        progress,
    )


def _load_safetensors(path: Path, config: ModelConfig, progress: Callable[[str], None]) -> LlamaWeights:
    from safetensors import safe_open

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {path}")
    where: dict[str, Path] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as handle:
            where.update({k: f for k in handle.keys()})  # noqa: SIM118 (safe_open is not iterable)

    def get(name: str) -> torch.Tensor:
        with safe_open(str(where[name]), framework="pt") as handle:
            return handle.get_tensor(name).to(torch.float32).contiguous()

    head = "lm_head.weight" if "lm_head.weight" in where else None
    return _assemble(
        get,
        _HF_LAYER_NAMES,
        lambda i: f"model.layers.{i}.",
        config,
        ("model.embed_tokens.weight", "model.norm.weight", head),
        progress,
    )


def save_hf_directory(checkpoint: Checkpoint, weights: LlamaWeights, out_dir: Path) -> None:
    """Write the weights, config and tokenizer as a Hugging Face Llama directory (float32 safetensors)."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(_hf_tensors(checkpoint.config, weights), str(out_dir / "model.safetensors"))
    write_hf_metadata(checkpoint, out_dir)


def _hf_tensors(config: ModelConfig, weights: LlamaWeights) -> dict[str, torch.Tensor]:
    """The weights under their Hugging Face names (contiguous, as safetensors writes them)."""
    tensors = {"model.embed_tokens.weight": weights.embedding, "model.norm.weight": weights.final_norm}
    if not config.tied_embeddings:
        tensors["lm_head.weight"] = weights.lm_head
    for i, layer in enumerate(weights.layers):
        for f in _LAYER_FIELDS:
            tensors[f"model.layers.{i}.{_HF_LAYER_NAMES[f]}.weight"] = getattr(layer, f)
    return {k: v.contiguous() for k, v in tensors.items()}
