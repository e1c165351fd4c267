"""Qwen XML tool calls (Qwen3-Coder, Qwen3.5 and later): ChatML prompts, token-aware parser, structural tags."""

from gateway.families import lazy_exports

from .claims import RECOGNITION

__getattr__ = lazy_exports(
    __name__,
    {
        ".family": ("FAMILIES", "Qwen3XmlFamily"),
        ".parser": ("Qwen3XmlParser",),
    },
)
__all__ = ["FAMILIES", "RECOGNITION", "Qwen3XmlFamily", "Qwen3XmlParser"]
