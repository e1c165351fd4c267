"""Kimi K3 (XTML: native prompt encoder, token-aware parser, structural tags bound to token ids) and Kimi K2."""

from backends.kimi_tokenizer import load_kimi_tokenizer

from .family import KimiK2Family, KimiK3Family
from .parser import KimiK3Parser

FAMILIES = (KimiK2Family, KimiK3Family)
__all__ = ["FAMILIES", "KimiK2Family", "KimiK3Family", "KimiK3Parser", "load_kimi_tokenizer"]
