"""The markers of Qwen's XML tool-call format (Qwen3-Coder, Qwen3.5 and later)."""

from __future__ import annotations

from gateway.families.base import reopened_reasoning

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
TURN_START = "<|im_start|>"
TURN_END = "<|im_end|>"

TOKEN_MARKERS = frozenset({THINK_START, THINK_END, TOOL_CALL_START, TOOL_CALL_END})
"""Added tokens in every Qwen vocabulary: structure only as those tokens, text when spelled with ordinary ones."""

FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
PARAMETER_OPEN = "<parameter="
PARAMETER_CLOSE = "</parameter>"
"""Text tags (ordinary tokens) inside a call."""

QWEN35_VOCABULARY = frozenset({"<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos_single>"})
"""Added tokens of Qwen3.5's vocabulary that Qwen2.5 / Qwen3 / Qwen3-Coder's lack: XML calls without a template."""


def prompt_opens_reasoning(prompt: str) -> bool:
    """Whether the prompt's last turn opened a `<think>` block that the model is to continue."""
    return reopened_reasoning(prompt, TURN_START, THINK_START, THINK_END)
