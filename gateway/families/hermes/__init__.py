"""Hermes (ChatML): the checkpoint's or our tool-aware template, `<think>` reasoning, `<tool_call>` JSON calls."""

from .family import HermesFamily
from .parser import HermesParser

FAMILIES = (HermesFamily,)
__all__ = ["FAMILIES", "HermesFamily", "HermesParser"]
