"""Kimi K3 (XTML): native prompt encoder, token-aware parser and structural tags bound to token ids."""

from backends.kimi_tokenizer import load_kimi_tokenizer

from .family import KimiK3Family
from .parser import KimiK3Parser

FAMILIES = (KimiK3Family,)
__all__ = ["FAMILIES", "KimiK3Family", "KimiK3Parser", "load_kimi_tokenizer"]
