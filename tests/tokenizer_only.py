"""A tokenize-only ServedModel around an in-memory tokenizer (no tokenizer.json round trip)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from backends.checkpoint import Checkpoint, ModelConfig
from gateway.models.registry import ServedModel, served_model_from_checkpoint


def tokenize_only_model(name: str, tokenizer: Tokenizer, family: str, context_length: int = 131072) -> ServedModel:
    """The ServedModel `name` of `family` on `tokenizer`, with no backend; every added token is a control token."""
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    config = ModelConfig(0, 0, 0, 0, 0, 0, 0.0, 0.0, vocab_size, context_length, False)
    checkpoint = Checkpoint(
        path=Path(name),
        config=config,
        tokenizer=tokenizer,
        chat_template=None,
        bos_token=None,
        eos_token=None,
        eos_token_ids=[],
        control_token_ids=sorted(tokenizer.get_added_tokens_decoder()),
    )
    return served_model_from_checkpoint(name, checkpoint, family, None)
