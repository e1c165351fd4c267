"""DeepSeek V4.1 (DSML): native prompt encoder, token-aware DSML parser and structural tags."""

from .family import DeepSeekV41Family
from .parser import DsmlParser

FAMILIES = (DeepSeekV41Family,)
__all__ = ["FAMILIES", "DeepSeekV41Family", "DsmlParser"]
