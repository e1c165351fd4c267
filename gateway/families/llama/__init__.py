"""Llama 3.x (JSON tool calls) and Llama 4 (pythonic tool calls): prompts, token-aware parsers, call grammars."""

from gateway.families import lazy_exports

from .claims import RECOGNITION

__getattr__ = lazy_exports(
    __name__,
    {
        ".family": ("FAMILIES", "Llama3Family", "Llama4Family", "llama3_tokenizer"),
        ".parser": ("LLAMA3_JSON", "LLAMA4_PYTHONIC", "LlamaParser"),
    },
)
__all__ = [
    "FAMILIES",
    "LLAMA3_JSON",
    "LLAMA4_PYTHONIC",
    "RECOGNITION",
    "Llama3Family",
    "Llama4Family",
    "LlamaParser",
    "llama3_tokenizer",
]
