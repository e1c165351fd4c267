"""The added tokens of GLM's chat and tool-call format (GLM-4.5 to GLM-5.x)."""

from __future__ import annotations

from gateway.families.base import reopened_reasoning

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
ARG_KEY_START = "<arg_key>"
ARG_KEY_END = "</arg_key>"
ARG_VALUE_START = "<arg_value>"
ARG_VALUE_END = "</arg_value>"
ASSISTANT = "<|assistant|>"
USER = "<|user|>"
OBSERVATION = "<|observation|>"
END_OF_TEXT = "<|endoftext|>"

ARGUMENT_MARKERS = (ARG_KEY_START, ARG_KEY_END, ARG_VALUE_START, ARG_VALUE_END)
"""The markers around each argument's key and value, inside a call."""
TOKEN_MARKERS = frozenset(
    {THINK_START, THINK_END, TOOL_CALL_START, TOOL_CALL_END, ARG_KEY_START, ARG_KEY_END, ARG_VALUE_START, ARG_VALUE_END}
)
"""Structure only as their added tokens; spelled with ordinary tokens, or inside a value, they are text."""


def prompt_opens_reasoning(prompt: str) -> bool:
    """Whether the prompt's last assistant turn opened `<think>` for the model to continue."""
    return reopened_reasoning(prompt, ASSISTANT, THINK_START, THINK_END)
