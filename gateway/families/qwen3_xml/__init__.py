"""Qwen XML tool calls (Qwen3-Coder, Qwen3.5 and later): ChatML prompts, token-aware parser, structural tags."""

from .family import Qwen3XmlFamily
from .parser import Qwen3XmlParser

FAMILIES = (Qwen3XmlFamily,)
__all__ = ["FAMILIES", "Qwen3XmlFamily", "Qwen3XmlParser"]
