"""The checkpoints the mistral families claim (read by the registry without importing the families)."""

from __future__ import annotations

from gateway.families.recognition import Recognition

from .markers import INST, INST_END, TEXT_THINK, TOOL_CALLS

MISTRAL_TOKENS = frozenset({INST, INST_END, TOOL_CALLS})

RECOGNITION = {
    "mistral": (Recognition(tokens=MISTRAL_TOKENS),),
    "mistral_text_think": (Recognition(tokens=MISTRAL_TOKENS, template=(TEXT_THINK,)),),  # a template asking `<think>`
}
