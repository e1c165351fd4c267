"""A tiny llama GGUF written by gguf's own writer: a seven-token byte-level BPE vocabulary, and optionally weights
quantized as the embedded model's are (a Q8_0 embedding, Q4_1 projections, float32 norms) in one block."""

from __future__ import annotations

from pathlib import Path

import numpy as np

HIDDEN, FFN, HEADS, KV_HEADS = 64, 64, 2, 1
"""Rows of 64: both quantizations pack blocks of 32 values."""
TOKENS = ["<s>", "</s>", "h", "i", "Ġ", "hi", "a"]


def write_tiny_gguf(
    path: Path,
    add_bos: bool | None = None,
    add_eos: bool | None = None,
    pre: str | None = None,
    unk_and_pad: bool = False,
    weights: bool = False,
) -> None:
    """A llama GGUF with one block: <s>, </s>, h, i, Ġ, hi, a, the merge `h i`; tensors only with `weights`."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    for name, value in [("block_count", 1), ("embedding_length", HIDDEN), ("feed_forward_length", FFN)]:
        writer.add_uint32(f"llama.{name}", value)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("gpt2")
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(TOKENS)
    writer.add_token_types([3, 3, 1, 1, 1, 1, 1])
    writer.add_token_merges(["h i"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    if unk_and_pad:
        writer.add_unk_token_id(6)
        writer.add_pad_token_id(1)
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    if add_eos is not None:
        writer.add_add_eos_token(add_eos)
    if weights:
        writer.add_chat_template("{% for m in messages %}<s>{{ m.content }}</s>{% endfor %}")
        _add_weights(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _add_weights(writer) -> None:
    """Random weights of one block, seeded; the embedding is tied (no output.weight), as SmolLM2's is."""
    import gguf

    rng = np.random.default_rng(0)
    kv = HIDDEN // HEADS * KV_HEADS
    shapes = {
        "token_embd": ((len(TOKENS), HIDDEN), gguf.GGMLQuantizationType.Q8_0),
        "blk.0.attn_norm": ((HIDDEN,), None),
        "blk.0.attn_q": ((HIDDEN, HIDDEN), gguf.GGMLQuantizationType.Q4_1),
        "blk.0.attn_k": ((kv, HIDDEN), gguf.GGMLQuantizationType.Q4_1),
        "blk.0.attn_v": ((kv, HIDDEN), gguf.GGMLQuantizationType.Q4_1),
        "blk.0.attn_output": ((HIDDEN, HIDDEN), gguf.GGMLQuantizationType.Q4_1),
        "blk.0.ffn_norm": ((HIDDEN,), None),
        "blk.0.ffn_gate": ((FFN, HIDDEN), gguf.GGMLQuantizationType.Q4_1),
        "blk.0.ffn_up": ((FFN, HIDDEN), gguf.GGMLQuantizationType.Q4_1),
        "blk.0.ffn_down": ((HIDDEN, FFN), gguf.GGMLQuantizationType.Q4_1),
        "output_norm": ((HIDDEN,), None),
    }
    for name, (shape, quantization) in shapes.items():
        values = rng.standard_normal(shape, dtype=np.float32)
        if quantization is None:
            writer.add_tensor(f"{name}.weight", values)
        else:
            writer.add_tensor(f"{name}.weight", gguf.quants.quantize(values, quantization), raw_dtype=quantization)
