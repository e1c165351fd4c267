"""The checkpoints the llama families claim (read by the registry without importing the families)."""

from __future__ import annotations

from gateway.families.recognition import Recognition

from .markers import END_HEADER, EOT, EOT4, HEADER_END, HEADER_START, START_HEADER

RECOGNITION = {
    "llama3_json": (Recognition(tokens=frozenset({START_HEADER, END_HEADER, EOT})),),
    "llama4_pythonic": (Recognition(tokens=frozenset({HEADER_START, HEADER_END, EOT4})),),
}
