"""Mistral's tekken tokenizer files (`tekken.json`) as a `tokenizers.Tokenizer`.

A tekken file holds the tiktoken-style vocabulary (`vocab`: rank and base64
bytes), the pre-tokenizer regex and the counts (`config`): the first
`default_num_special_tokens` ids are special tokens (listed in
`special_tokens`, or for older files named by the caller), ordinary token
`rank` has id `rank + default_num_special_tokens`, and only the first
`default_vocab_size - default_num_special_tokens` ranks are in use. The
conversion is the tiktoken one (`backends.tiktoken_bpe`); mistral_common is
never imported.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from pathlib import Path

from tokenizers import Tokenizer

from backends.conversion_cache import cached_tokenizer
from backends.tiktoken_bpe import tokenizer_from_ranks

SPECIAL_TEMPLATE = "<SPECIAL_{}>"
"""How tekken names a special id it has no name for."""


def load_tekken(path: Path, named: Mapping[int, str] = {}) -> Tokenizer:
    """The tokenizer of a tekken file; `named` gives special ids their spellings when the file lists none."""
    return cached_tokenizer([path], [repr(sorted(named.items()))], lambda: _convert(path, named))


def _convert(path: Path, named: Mapping[int, str]) -> Tokenizer:
    data = json.loads(path.read_text(encoding="utf-8"))
    config = data["config"]
    specials_count = int(config["default_num_special_tokens"])
    live = int(config["default_vocab_size"]) - specials_count
    ranks = {
        base64.b64decode(entry["token_bytes"]): entry["rank"] + specials_count
        for entry in data["vocab"]
        if entry["rank"] < live
    }
    listed = {int(s["rank"]): s["token_str"] for s in data.get("special_tokens") or ()}
    specials = {i: listed.get(i) or named.get(i) or SPECIAL_TEMPLATE.format(i) for i in range(specials_count)}
    return tokenizer_from_ranks(ranks, specials, config["pattern"], specials_in_vocab=True)
