"""DeepSeek V3, V3.1, V3.2, V4 and V4.1: one family per output-format version, sharing markers, prompts and parsers."""

from gateway.families import lazy_exports

from .claims import RECOGNITION

__getattr__ = lazy_exports(
    __name__,
    {
        ".family": (
            "FAMILIES",
            "DeepSeekV3Family",
            "DeepSeekV4Family",
            "DeepSeekV31Family",
            "DeepSeekV32Family",
            "DeepSeekV41Family",
        ),
        ".parser": ("DsmlParser",),
    },
)
__all__ = [
    "FAMILIES",
    "RECOGNITION",
    "DeepSeekV3Family",
    "DeepSeekV4Family",
    "DeepSeekV31Family",
    "DeepSeekV32Family",
    "DeepSeekV41Family",
    "DsmlParser",
]
