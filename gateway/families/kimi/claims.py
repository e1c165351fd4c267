"""The checkpoints the kimi families claim (read by the registry without importing the families)."""

from __future__ import annotations

from gateway.families.recognition import Recognition

from .markers import CLOSE, END_OF_MSG, IM_END, K2_SECTIONS, OPEN, SEP

RECOGNITION = {
    "kimi_k2": (Recognition(tokens=frozenset({IM_END, *K2_SECTIONS.call_tokens})),),
    "kimi_k3": (Recognition(tokens=frozenset({OPEN, CLOSE, SEP, END_OF_MSG})),),
}
