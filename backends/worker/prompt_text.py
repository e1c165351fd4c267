"""A `text` prompt's token ids, refused unencoded when its length in characters already proves it past the context.

Every token stands for at most K characters of the text (K: the longest token of the vocabulary, added tokens
included), so a text of more than K * (context - 1) characters has at least `context` tokens. The bound holds only
for a tokenizer that never drops characters before its model and whose model never covers a run of characters
with one token outside its vocabulary (a fused unknown token): for any other, `max_chars_per_token` is None and the
text is encoded whole.
"""

from __future__ import annotations

import json
from typing import Any

from tokenizers import Tokenizer

from backends.worker.protocol import ProtocolError

# Normalizers and pre-tokenizers that never shorten the text (in characters) they are given.
_KEEPING_NORMALIZERS = frozenset({"Prepend", "Lowercase", "NFD", "NFKD"})
_KEEPING_PRE_TOKENIZERS = frozenset({"ByteLevel", "Metaspace", "Digits", "Punctuation"})
_BYTE_TOKENS = frozenset(f"<0x{b:02X}>" for b in range(256))


def max_chars_per_token(tokenizer: Tokenizer) -> int | None:
    """The most characters of a prompt one token can stand for, or None when this tokenizer gives no such bound."""
    spec = json.loads(tokenizer.to_str())
    if not (
        _keeps_length(spec.get("normalizer"), "normalizers")
        and _keeps_length(spec.get("pre_tokenizer"), "pretokenizers")
    ):
        return None
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    if not _never_fuses_unknowns(spec["model"], vocab):
        return None
    return max(map(len, vocab), default=None)


def _keeps_length(step: dict[str, Any] | None, sequence_key: str) -> bool:
    """`step` (a normalizer or pre-tokenizer, maybe a Sequence) never drops a character."""
    if step is None:
        return True
    kind = step.get("type")
    if kind == "Sequence":
        parts = step.get(sequence_key, [])
        return all(_keeps_length(part, sequence_key) for part in parts)
    if kind == "Replace":  # a literal pattern replaced by no shorter content
        pattern = step.get("pattern", {})
        return "String" in pattern and len(step.get("content", "")) >= len(pattern["String"])
    if kind == "Split":
        return step.get("behavior") != "Removed"
    return kind in _KEEPING_NORMALIZERS or kind in _KEEPING_PRE_TOKENIZERS


def _never_fuses_unknowns(model: dict[str, Any], vocab: dict[str, int]) -> bool:
    """A BPE model: each token covers at most its own string, an unknown character one token (unfused, or spelled
    in byte tokens when all 256 are there)."""
    if model.get("type") != "BPE":
        return False
    if model.get("unk_token") is None or not model.get("fuse_unk"):
        return True
    return bool(model.get("byte_fallback")) and _BYTE_TOKENS <= vocab.keys()


def encode_prompt_text(tokenizer: Tokenizer, text: str, context_length: int, chars_per_token: int | None) -> list[int]:
    """The ids of `text` (no special tokens added), by tokenizers' batch call, which releases the GIL (`encode`
    holds it: a long text stalled the event loop and the engine thread for seconds); ProtocolError, without
    encoding, for a text longer in characters than `context_length - 1` tokens can stand for."""
    if chars_per_token is not None and len(text) > chars_per_token * (context_length - 1):
        at_least = -(-len(text) // chars_per_token)
        raise ProtocolError(
            f"the prompt has at least {at_least} tokens ({len(text)} characters, at most {chars_per_token} per "
            f"token); this model's context length is {context_length}"
        )
    return tokenizer.encode_batch_fast([text], add_special_tokens=False)[0].ids
