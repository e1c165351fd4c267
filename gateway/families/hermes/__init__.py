"""The hermes model family (ChatML, `<think>` reasoning, `<tool_call>` JSON calls)."""

from .family import HermesFamily
from .parser import HermesParser

__all__ = ["HermesFamily", "HermesParser"]
