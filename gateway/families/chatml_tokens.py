"""The added tokens of the ChatML families (hermes, qwen3_xml): turns, `<think>` and `<tool_call>` (no family code,
so that recognising a checkpoint by them imports none)."""

from __future__ import annotations

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
TURN_START = "<|im_start|>"
TURN_END = "<|im_end|>"

TOKEN_MARKERS = frozenset({THINK_START, THINK_END, TOOL_CALL_START, TOOL_CALL_END})
"""Added tokens in every Qwen vocabulary: structure only as those tokens, text when spelled with ordinary ones."""
