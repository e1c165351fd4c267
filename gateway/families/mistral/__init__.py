"""Mistral ([TOOL_CALLS] JSON arrays and NAME[ARGS]{…} calls, [THINK] reasoning) on the real tekken and SentencePiece
tokenizers."""

from .family import FAMILIES, MistralFamily, MistralTextThinkFamily, sentencepiece_tokenizer, tekken_tokenizer
from .parser import MistralParser

__all__ = [
    "FAMILIES",
    "MistralFamily",
    "MistralParser",
    "MistralTextThinkFamily",
    "sentencepiece_tokenizer",
    "tekken_tokenizer",
]
