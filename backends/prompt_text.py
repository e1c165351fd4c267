"""How many tokens a prompt text has at least, read from its length in characters without encoding it (the gateway
and the bundled worker refuse a prompt this proves past the context before encoding it).

Every token stands for at most K characters of the text (K: the longest token of the vocabulary, added tokens
included), so a text of more than K * (context - 1) characters has at least `context` tokens. The characters the
tokenizer spells in no token (a byte-level BPE without an unknown token drops a byte missing from its vocabulary:
some ASCII controls in small vocabularies) are not counted. The bound holds only for a tokenizer that drops no
other character, before its model or in it, and never covers a run of characters with one token outside its
vocabulary (a fused unknown token, an added token taking the whitespace beside it): for any other, `text_bound`
is None and the text is encoded whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer, models

from backends.detokenizer import BYTE_LEVEL_CHARS

# Normalizers and pre-tokenizers that never shorten the text (in characters) they are given.
_KEEPING_NORMALIZERS = frozenset({"Prepend", "Lowercase", "NFD", "NFKD"})
_KEEPING_PRE_TOKENIZERS = frozenset({"ByteLevel", "Metaspace", "Digits", "Punctuation"})
_BYTE_TOKENS = frozenset(f"<0x{b:02X}>" for b in range(256))


@dataclass(frozen=True)
class TextBound:
    """Each token stands for at most `chars_per_token` characters of a text, besides the `dropped` characters."""

    chars_per_token: int
    dropped: str = ""

    def counted(self, text: str) -> int:
        """The characters of `text` some token stands for."""
        return len(text) - sum(text.count(char) for char in self.dropped)

    def least_tokens(self, text: str) -> int:
        """The fewest tokens `text` can be encoded into."""
        return -(-self.counted(text) // self.chars_per_token)


def text_bound(tokenizer: Tokenizer) -> TextBound | None:
    """How many characters of a prompt one token can stand for, or None when this tokenizer gives no such bound."""
    spec = _spec(tokenizer)
    if not (
        _keeps_length(spec.get("normalizer"), "normalizers")
        and _keeps_length(spec.get("pre_tokenizer"), "pretokenizers")
    ):
        return None
    if any(added.get("lstrip") or added.get("rstrip") for added in spec.get("added_tokens") or []):
        return None
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    dropped = _dropped_characters(spec, vocab)
    if dropped is None or not vocab:
        return None
    return TextBound(max(map(len, vocab)), dropped)


def _spec(tokenizer: Tokenizer) -> dict[str, Any]:
    """The parts of the tokenizer's JSON document the bound reads, each read alone: the whole document (its vocabulary
    and merges, written out and parsed back) cost ~70 ms of CPU for SmolLM2's 49K vocabulary, more for 150K ones."""
    model = tokenizer.model
    bpe = isinstance(model, models.BPE)
    return {
        "normalizer": _component(tokenizer.normalizer),
        "pre_tokenizer": _component(tokenizer.pre_tokenizer),
        "added_tokens": [
            {"lstrip": added.lstrip, "rstrip": added.rstrip} for added in tokenizer.get_added_tokens_decoder().values()
        ],
        "model": {
            "type": "BPE" if bpe else type(model).__name__,
            **(
                {"byte_fallback": model.byte_fallback, "unk_token": model.unk_token, "fuse_unk": model.fuse_unk}
                if bpe
                else {}
            ),
        },
    }


def _component(part: Any) -> dict[str, Any] | None:
    """A normalizer's or pre-tokenizer's JSON (as the tokenizer's document writes it), None for none."""
    return None if part is None else json.loads(part.__getstate__())


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


def _dropped_characters(spec: dict[str, Any], vocab: dict[str, int]) -> str | None:
    """The characters a BPE model spells in no token, when each other character is spelled in tokens covering at
    most their own strings: in byte tokens (all 256 there), byte-level characters, or one unfused unknown token;
    None for any other model."""
    model = spec["model"]
    if model.get("type") != "BPE":
        return None
    if model.get("byte_fallback") and _BYTE_TOKENS <= vocab.keys():
        return ""
    if _has_step(spec.get("pre_tokenizer"), "ByteLevel"):
        missing = [byte for byte, char in sorted(BYTE_LEVEL_CHARS.items()) if char not in vocab]
        # A character of several bytes has a continuation byte (0x80-0xBF): spelled if those are all there.
        if not any(0x80 <= byte < 0xC0 for byte in missing):
            dropped = "".join(chr(byte) for byte in missing if byte < 0x80)
            if not dropped or spec.get("normalizer") is None:  # counted in the text as the model meets them
                return dropped
    if model.get("unk_token") is not None and not model.get("fuse_unk"):
        return ""
    return None


def _has_step(step: dict[str, Any] | None, kind: str) -> bool:
    """`step` is of `kind` or a Sequence holding one."""
    if step is None:
        return False
    parts = step.get("normalizers") or step.get("pretokenizers") or []
    return step.get("type") == kind or any(_has_step(part, kind) for part in parts)
