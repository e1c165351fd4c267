"""The text markers of the hermes (Qwen2.5 / Qwen3) output format."""

from gateway.families.base import reopened_reasoning

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
TURN_START = "<|im_start|>"
TURN_END = "<|im_end|>"


def prompt_opens_reasoning(prompt: str) -> bool:
    """Whether the prompt's last turn opened a `<think>` block that the model is to continue."""
    return reopened_reasoning(prompt, TURN_START, THINK_START, THINK_END)
