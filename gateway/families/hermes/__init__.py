"""Hermes (ChatML): the checkpoint's or our tool-aware template, `<think>` reasoning, `<tool_call>` JSON calls."""

from gateway.families import lazy_exports

from .claims import RECOGNITION

__getattr__ = lazy_exports(
    __name__,
    {
        ".family": ("FAMILIES", "HermesFamily"),
        ".parser": ("HermesParser",),
    },
)
__all__ = ["FAMILIES", "RECOGNITION", "HermesFamily", "HermesParser"]
