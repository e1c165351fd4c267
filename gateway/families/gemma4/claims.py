"""The checkpoints the gemma4 family claims (read by the registry without importing the family)."""

from __future__ import annotations

from gateway.families.recognition import Recognition

from .markers import CHANNEL, CHANNEL_END, TOOL_CALL, TOOL_CALL_END, TURN, TURN_END

RECOGNITION = {
    "gemma4": (Recognition(tokens=frozenset({TURN, TURN_END, TOOL_CALL, TOOL_CALL_END, CHANNEL, CHANNEL_END})),),
}
