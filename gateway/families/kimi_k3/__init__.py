"""Kimi K3 (XTML): prompt encoder, tiktoken loader, token-aware parser and structural tags."""

from .family import KimiK3Family
from .parser import KimiK3Parser
from .tokenizer import load_kimi_tokenizer

__all__ = ["KimiK3Family", "KimiK3Parser", "load_kimi_tokenizer"]
