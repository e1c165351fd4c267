"""Llama 3.x and Llama 4 control tokens; Llama 3.1+'s special-token names at their ids."""

from __future__ import annotations

BEGIN_OF_TEXT = "<|begin_of_text|>"
END_OF_TEXT = "<|end_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
EOT = "<|eot_id|>"
EOM = "<|eom_id|>"
PYTHON_TAG = "<|python_tag|>"

HEADER_START = "<|header_start|>"
HEADER_END = "<|header_end|>"
EOT4 = "<|eot|>"
EOM4 = "<|eom|>"
PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"

LLAMA3_STOPS = (EOT, EOM, END_OF_TEXT)
LLAMA4_STOPS = (EOT4, EOM4, END_OF_TEXT)

FIRST_SPECIAL = 128000
SPECIAL_COUNT = 256
LLAMA31_NAMED = {
    128000: BEGIN_OF_TEXT,
    128001: END_OF_TEXT,
    128004: "<|finetune_right_pad_id|>",
    128006: START_HEADER,
    128007: END_HEADER,
    128008: EOM,
    128009: EOT,
    128010: PYTHON_TAG,
}
"""Llama 3.1+'s named special tokens; the other ids up to 128255 are `<|reserved_special_token_N|>` in order."""


def llama31_specials() -> dict[int, str]:
    """Id -> spelling of Llama 3.1+'s 256 special tokens."""
    reserved = (i for i in range(SPECIAL_COUNT))
    return {
        i: LLAMA31_NAMED.get(i) or f"<|reserved_special_token_{next(reserved)}|>"
        for i in range(FIRST_SPECIAL, FIRST_SPECIAL + SPECIAL_COUNT)
    }


CALL_TRIGGER = '{"name": '
"""What opens a Llama 3 call anywhere in the output: the trigger of the lazy `auto` grammar, and of the parser."""
