"""Kimi K3 (XTML): prompt encoder, tiktoken loader, token-aware parser and structural tags."""

from backends.kimi_tokenizer import load_kimi_tokenizer

from .family import KimiK3Family
from .parser import KimiK3Parser

__all__ = ["KimiK3Family", "KimiK3Parser", "load_kimi_tokenizer"]
