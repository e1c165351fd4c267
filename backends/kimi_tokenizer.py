"""Kimi checkpoints' tiktoken vocabulary as a `tokenizers.Tokenizer`, so the gateway uses it unchanged.

A Kimi checkpoint ships `tiktoken.model` (one `base64(token bytes) rank` per
line) and `tokenizer_config.json`, whose `added_tokens_decoder` names the
special tokens that follow the ranks (`<|end_of_msg|>`, `<|open|>`, …); the
256 ids after the ranks are special, unnamed ones `<|reserved_token_N|>`.

The conversion is byte-level BPE with Kimi's pre-tokenizer regex. tiktoken
merges the adjacent pair whose concatenation has the lowest rank; the BPE
model gets one merge per way of writing each token as two tokens, ordered by
the token's rank, and `ignore_merges` so that a piece which is itself a token
is taken whole, as tiktoken does. Not reproduced: tiktoken-Kimi's 400,000
character encode windows (a longer text may differ at the window seams).
"""

from __future__ import annotations

import base64
import json
from functools import cache
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

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


@cache
def byte_symbols() -> tuple[str, ...]:
    """The printable character that byte-level BPE uses for each byte value (GPT-2's table)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return tuple(chr(b) if b in printable else chr(next(extra)) for b in range(256))


def to_symbols(token: bytes) -> str:
    """A token's bytes as byte-level BPE vocabulary text."""
    table = byte_symbols()
    return "".join(table[b] for b in token)


def read_ranks(path: Path) -> dict[bytes, int]:
    """The mergeable ranks of a tiktoken model file."""
    ranks: dict[bytes, int] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def special_tokens(config: dict[str, Any], first_id: int) -> dict[int, str]:
    """Id → spelling of the special tokens after the ranks: `added_tokens_decoder`, reserved names elsewhere."""
    named = {int(i): spec["content"] for i, spec in config.get("added_tokens_decoder", {}).items()}
    last = max([first_id + RESERVED_SPECIAL_TOKENS - 1, *named])
    return {i: named.get(i, f"<|reserved_token_{i}|>") for i in range(first_id, last + 1)}


def merges_of(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Every split of every multi-byte token into two tokens, in the order tiktoken would apply them."""
    merges: list[tuple[int, int, int, bytes, bytes]] = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], left, right))
    merges.sort()
    return [(left, right) for *_, left, right in merges]


def tokenizer_from_ranks(ranks: dict[bytes, int], specials: dict[int, str], pattern: str = KIMI_PATTERN) -> Tokenizer:
    """A byte-level BPE `Tokenizer` that encodes as tiktoken does with `ranks`, plus `specials` as added tokens."""
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": text,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, text in sorted(specials.items())
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": {to_symbols(token): rank for token, rank in ranks.items()},
            "merges": [[to_symbols(left), to_symbols(right)] for left, right in merges_of(ranks)],
        },
    }
    return Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))


def load_kimi_tokenizer(directory: Path) -> Tokenizer:
    """The tokenizer of a Kimi checkpoint directory (`tiktoken.model` + `tokenizer_config.json`)."""
    ranks = read_ranks(directory / "tiktoken.model")
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    return tokenizer_from_ranks(ranks, special_tokens(config, len(ranks)))
