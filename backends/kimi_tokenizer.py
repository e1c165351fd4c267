"""Kimi checkpoints' tiktoken vocabulary as a `tokenizers.Tokenizer`, so the gateway uses it unchanged.

A Kimi checkpoint ships `tiktoken.model` (one `base64(token bytes) rank` per
line) and `tokenizer_config.json`, whose `added_tokens_decoder` names the
special tokens that follow the ranks (`<|end_of_msg|>`, `<|open|>`, …); the
256 ids after the ranks are special, unnamed ones `<|reserved_token_N|>`.

The conversion (`backends.tiktoken_bpe`) is byte-level BPE with Kimi's
pre-tokenizer regex. Not reproduced: tiktoken-Kimi's 400,000
character encode windows (a longer text may differ at the window seams).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from backends.tiktoken_bpe import read_ranks, tokenizer_from_ranks

__all__ = ["KIMI_PATTERN", "load_kimi_tokenizer", "read_ranks", "special_tokens"]

_KIMI_ALTERNATIVES = (
    r"[\p{Han}]+",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
)
KIMI_PATTERN = "|".join(_KIMI_ALTERNATIVES)
"""The pre-tokenizer regex of Kimi's tiktoken tokenizer (class intersections work in Oniguruma too)."""

RESERVED_SPECIAL_TOKENS = 256


def special_tokens(config: dict[str, Any], first_id: int) -> dict[int, str]:
    """Id → spelling of the special tokens after the ranks: `added_tokens_decoder`, reserved names elsewhere."""
    named = {int(i): spec["content"] for i, spec in config.get("added_tokens_decoder", {}).items()}
    last = max([first_id + RESERVED_SPECIAL_TOKENS - 1, *named])
    return {i: named.get(i, f"<|reserved_token_{i}|>") for i in range(first_id, last + 1)}


def load_kimi_tokenizer(directory: Path) -> Tokenizer:
    """The tokenizer of a Kimi checkpoint directory (`tiktoken.model` + `tokenizer_config.json`)."""
    ranks = read_ranks(directory / "tiktoken.model")
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    return tokenizer_from_ranks(ranks, special_tokens(config, len(ranks)), KIMI_PATTERN)
