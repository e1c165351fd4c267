"""Mistral ([TOOL_CALLS] JSON arrays and NAME[ARGS]{…} calls, [THINK] reasoning) on the real tekken and SentencePiece
tokenizers."""

from gateway.families import lazy_exports

from .claims import RECOGNITION

__getattr__ = lazy_exports(
    __name__,
    {
        ".family": (
            "FAMILIES",
            "MistralFamily",
            "MistralTextThinkFamily",
            "sentencepiece_tokenizer",
            "tekken_tokenizer",
        ),
        ".parser": ("MistralParser",),
    },
)
__all__ = [
    "FAMILIES",
    "RECOGNITION",
    "MistralFamily",
    "MistralParser",
    "MistralTextThinkFamily",
    "sentencepiece_tokenizer",
    "tekken_tokenizer",
]
