"""Gemma 4: `<|tool_call>call:NAME{…}` calls in Gemma's object notation, `<|channel>thought` reasoning."""

from .family import Gemma4Family
from .parser import Gemma4Parser

FAMILIES = (Gemma4Family,)
__all__ = ["FAMILIES", "Gemma4Family", "Gemma4Parser"]
