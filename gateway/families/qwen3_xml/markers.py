"""The text tags of Qwen's XML tool calls (Qwen3-Coder, Qwen3.5 and later); the added tokens are ChatML's
(`gateway/families/chatml.py`)."""

from __future__ import annotations

FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
PARAMETER_OPEN = "<parameter="
PARAMETER_CLOSE = "</parameter>"
"""Text tags (ordinary tokens) inside a call."""

QWEN35_VOCABULARY = frozenset({"<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos_single>"})
"""Added tokens of Qwen3.5's vocabulary that Qwen2.5 / Qwen3 / Qwen3-Coder's lack: XML calls without a template."""
