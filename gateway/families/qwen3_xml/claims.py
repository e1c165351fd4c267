"""The checkpoints the qwen3_xml family claims (read by the registry without importing the family)."""

from __future__ import annotations

from gateway.families.chatml_tokens import TOOL_CALL_END, TOOL_CALL_START, TURN_END, TURN_START
from gateway.families.recognition import Recognition

from .markers import FUNCTION_OPEN, PARAMETER_OPEN, QWEN35_VOCABULARY

CHATML_CALLS = frozenset({TURN_START, TURN_END, TOOL_CALL_START, TOOL_CALL_END})

RECOGNITION = {
    "qwen3_xml": (
        Recognition(tokens=CHATML_CALLS, template=(FUNCTION_OPEN, PARAMETER_OPEN)),  # Qwen3-Coder's template
        Recognition(tokens=CHATML_CALLS | QWEN35_VOCABULARY),  # Qwen3.5's vocabulary, with or without template
    ),
}
