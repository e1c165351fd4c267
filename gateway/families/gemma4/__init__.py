"""Gemma 4: `<|tool_call>call:NAME{…}` calls in Gemma's object notation, `<|channel>thought` reasoning."""

from gateway.families import lazy_exports

from .claims import RECOGNITION

__getattr__ = lazy_exports(
    __name__,
    {
        ".family": ("FAMILIES", "Gemma4Family"),
        ".parser": ("Gemma4Parser",),
    },
)
__all__ = ["FAMILIES", "RECOGNITION", "Gemma4Family", "Gemma4Parser"]
