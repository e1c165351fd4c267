"""The checkpoints the hermes family claims (read by the registry without importing the family)."""

from __future__ import annotations

from gateway.families.chatml_tokens import TOOL_CALL_END, TOOL_CALL_START, TURN_END, TURN_START
from gateway.families.recognition import Recognition

RECOGNITION = {
    "hermes": (
        Recognition(tokens=frozenset({TURN_START, TURN_END})),  # ChatML (the embedded SmolLM2)
        Recognition(tokens=frozenset({TURN_START, TURN_END, TOOL_CALL_START, TOOL_CALL_END})),  # Qwen2.5 / Qwen3
    ),
}
