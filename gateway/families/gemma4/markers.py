"""Gemma 4's control tokens (their ids come from the served vocabulary)."""

from __future__ import annotations

TOOL_CALL = "<|tool_call>"
TOOL_CALL_END = "<tool_call|>"
QUOTE = '<|"|>'
"""Delimits a string value in a call's arguments (both ends)."""
CHANNEL = "<|channel>"
CHANNEL_END = "<channel|>"
TOOL_RESPONSE = "<|tool_response>"
TOOL_RESPONSE_END = "<tool_response|>"
TURN = "<|turn>"
TURN_END = "<turn|>"
THINK = "<|think|>"

THOUGHT = "thought"
"""The channel name that opens reasoning (`<|channel>thought\\n…<channel|>`)."""
CALL_PREFIX = "call:"
STOP_TOKENS = (TURN_END, TOOL_RESPONSE)
CONTROL_TOKENS = (TOOL_CALL, TOOL_CALL_END, QUOTE, CHANNEL, CHANNEL_END)
"""The tokens that are structure in an answer."""
