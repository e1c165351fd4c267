"""Kimi K3 (XTML: native prompt encoder, token-aware parser, structural tags bound to token ids) and Kimi K2."""

from gateway.families import lazy_exports

from .claims import RECOGNITION

__getattr__ = lazy_exports(
    __name__,
    {
        ".family": ("FAMILIES", "KimiK2Family", "KimiK3Family"),
        ".parser": ("KimiK3Parser",),
        "backends.kimi_tokenizer": ("load_kimi_tokenizer",),
    },
)
__all__ = ["FAMILIES", "RECOGNITION", "KimiK2Family", "KimiK3Family", "KimiK3Parser", "load_kimi_tokenizer"]
