"""Tiktoken rank files as `tokenizers.Tokenizer`s: byte-level BPE that encodes as tiktoken does.

A tiktoken model file holds one `base64(token bytes) rank` per line. tiktoken
merges the adjacent pair whose concatenation has the lowest rank; the BPE
model gets one merge per way of writing each token as two tokens, ordered by
the token's rank, and `ignore_merges` so that a piece which is itself a token
is taken whole, as tiktoken does. Each vocabulary brings its own pre-tokenizer
regex and added tokens (`backends.kimi_tokenizer`, `backends.qwen_tokenizer`).
"""

from __future__ import annotations

import base64
import json
from functools import cache
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer


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


def added_token(token_id: int, text: str, special: bool) -> dict[str, Any]:
    """A `tokenizer.json` added-token entry: `text` matched exactly, as written."""
    return {
        "id": token_id,
        "content": text,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


def tokenizer_from_ranks(
    ranks: dict[bytes, int],
    specials: dict[int, str],
    pattern: str,
    *,
    not_special: frozenset[str] = frozenset(),
    nfc: bool = False,
    specials_in_vocab: bool = False,
) -> Tokenizer:
    """A byte-level BPE `Tokenizer` that encodes as tiktoken does with `ranks` and the pre-tokenizer regex `pattern`,
    plus `specials` as added tokens (special unless named in `not_special`); `nfc` normalizes text to NFC first.

    With `specials_in_vocab` each special is also a vocabulary entry at its id: `tokenizers` gives an added token the
    model's id of its spelling, else a fresh id after the vocabulary, so specials placed before the ordinary ids
    (tekken) must be vocabulary entries (no merge forms them, so text never encodes to one). ValueError if a
    spelling is also an ordinary token.
    """
    vocab = {to_symbols(token): rank for token, rank in ranks.items()}
    if specials_in_vocab:
        clashes = [text for text in specials.values() if text in vocab]
        if clashes:
            raise ValueError(f"special tokens spelled like ordinary tokens: {clashes[:5]}")
        vocab.update((text, i) for i, text in specials.items())
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [added_token(i, text, text not in not_special) for i, text in sorted(specials.items())],
        "normalizer": {"type": "NFC"} if nfc else None,
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
            "vocab": vocab,
            "merges": [[to_symbols(left), to_symbols(right)] for left, right in merges_of(ranks)],
        },
    }
    return Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
