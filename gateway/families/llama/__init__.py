"""Llama 3.x (JSON tool calls) and Llama 4 (pythonic tool calls): prompts, token-aware parsers, call grammars."""

from .family import Llama3Family, Llama4Family, llama3_tokenizer
from .parser import LLAMA3_JSON, LLAMA4_PYTHONIC, LlamaParser

FAMILIES = (Llama3Family, Llama4Family)
__all__ = [
    "FAMILIES",
    "LLAMA3_JSON",
    "LLAMA4_PYTHONIC",
    "Llama3Family",
    "Llama4Family",
    "LlamaParser",
    "llama3_tokenizer",
]
