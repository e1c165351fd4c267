"""gpt-oss (OpenAI Harmony): native prompt encoder, token-aware channel parser and structural tags bound to token ids."""

from .family import GptOssFamily, harmony_tokenizer
from .parser import HarmonyParser

FAMILIES = (GptOssFamily,)
__all__ = ["FAMILIES", "GptOssFamily", "HarmonyParser", "harmony_tokenizer"]
