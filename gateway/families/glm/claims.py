"""The checkpoints the glm families claim (read by the registry without importing the families)."""

from __future__ import annotations

from gateway.families.recognition import Recognition

from .markers import (
    ARG_KEY_END,
    ARG_KEY_START,
    ARG_VALUE_END,
    ARG_VALUE_START,
    ASSISTANT,
    OBSERVATION,
    TOOL_CALL_END,
    TOOL_CALL_START,
    USER,
)

GLM_TOKENS = frozenset(
    {USER, ASSISTANT, OBSERVATION, TOOL_CALL_START, TOOL_CALL_END, ARG_KEY_START, ARG_KEY_END, ARG_VALUE_START,
     ARG_VALUE_END}
)  # fmt: skip
"""GLM-4.5's added tokens, kept by 4.6, 4.7 and 5.x: the vocabulary alone cannot tell the two layouts apart."""

RECOGNITION = {
    "glm45": (Recognition(tokens=GLM_TOKENS), Recognition(tokens=GLM_TOKENS, template=("</arg_key>\n<arg_value>",))),
    "glm47": (Recognition(tokens=GLM_TOKENS), Recognition(tokens=GLM_TOKENS, template=("</arg_key><arg_value>",))),
}
