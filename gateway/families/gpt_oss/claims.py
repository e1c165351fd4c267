"""The checkpoints the gpt_oss family claims (read by the registry without importing the family)."""

from __future__ import annotations

from gateway.families.recognition import Recognition

from .markers import CONTROL_TOKENS

RECOGNITION = {
    "gpt_oss": (Recognition(tokens=frozenset(CONTROL_TOKENS)),),  # o200k_harmony's Harmony tokens
}
