"""DeepSeek V3, V3.1, V3.2, V4 and V4.1: one family per output-format version, sharing markers, prompts and parsers."""

from .family import DeepSeekV3Family, DeepSeekV4Family, DeepSeekV31Family, DeepSeekV32Family, DeepSeekV41Family
from .parser import DsmlParser

FAMILIES = (DeepSeekV3Family, DeepSeekV31Family, DeepSeekV32Family, DeepSeekV4Family, DeepSeekV41Family)
__all__ = [
    "FAMILIES",
    "DeepSeekV3Family",
    "DeepSeekV4Family",
    "DeepSeekV31Family",
    "DeepSeekV32Family",
    "DeepSeekV41Family",
    "DsmlParser",
]
