"""Mistral ([TOOL_CALLS] JSON arrays and NAME[ARGS]{…} calls, [THINK] reasoning) on the real tekken tokenizer."""

from .family import FAMILIES, MistralFamily, MistralTextThinkFamily, tekken_tokenizer
from .parser import MistralParser

__all__ = ["FAMILIES", "MistralFamily", "MistralParser", "MistralTextThinkFamily", "tekken_tokenizer"]
