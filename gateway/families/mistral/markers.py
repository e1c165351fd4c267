"""Mistral's control tokens: tekken special ids (v7+) and the SentencePiece v3 ones."""

from __future__ import annotations

BOS = "<s>"
EOS = "</s>"
INST = "[INST]"
INST_END = "[/INST]"
AVAILABLE_TOOLS = "[AVAILABLE_TOOLS]"
AVAILABLE_TOOLS_END = "[/AVAILABLE_TOOLS]"
TOOL_RESULTS = "[TOOL_RESULTS]"
TOOL_RESULTS_END = "[/TOOL_RESULTS]"
TOOL_CALLS = "[TOOL_CALLS]"
SYSTEM_PROMPT = "[SYSTEM_PROMPT]"
SYSTEM_PROMPT_END = "[/SYSTEM_PROMPT]"
TOOL_CONTENT = "[TOOL_CONTENT]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
THINK = "[THINK]"
THINK_END = "[/THINK]"
TEXT_THINK = "<think>"
TEXT_THINK_END = "</think>"

TEKKEN_SPECIALS = {
    **dict(
        enumerate(
            (
                "<unk>", BOS, EOS, INST, INST_END, AVAILABLE_TOOLS, AVAILABLE_TOOLS_END, TOOL_RESULTS,
                TOOL_RESULTS_END, TOOL_CALLS, "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]",
                "[SUFFIX]", SYSTEM_PROMPT, SYSTEM_PROMPT_END, TOOL_CONTENT,
            )
        )
    ),
    32: ARGS,
    33: CALL_ID,
    34: THINK,
    35: THINK_END,
}  # fmt: skip
"""Tekken special ids by spelling as the v7+ tekken files list them (the ones the formats here use)."""
