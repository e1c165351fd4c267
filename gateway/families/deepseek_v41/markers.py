"""Spellings of the DeepSeek V4.1 control tokens and DSML tag names the family writes and reads."""

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
SYSTEM = "<｜System｜>"  # plain text with the V4 tokenizer: it has no token for it
THINK_START = "<think>"
THINK_END = "</think>"
DSML = "｜DSML｜"

CALLS = " calls"
INVOKE = " invoke"
PARAMETER = " parameter"

CALLS_OPEN = f"<{DSML}{CALLS}>"
CALLS_CLOSE = f"</{DSML}{CALLS}>"
INVOKE_CLOSE = f"</{DSML}{INVOKE}>"
PARAMETER_CLOSE = f"</{DSML}{PARAMETER}>"

GROUNDING = frozenset(
    {
        "<｜ref｜>",
        "<｜/ref｜>",
        "<｜box｜>",
        "<｜/box｜>",
        "<｜point｜>",
        "<｜/point｜>",
        "<｜polygon｜>",
        "<｜/polygon｜>",
    }
)
"""Tokens an assistant's content and reasoning may keep (the model writes them itself)."""


def invoke_open(name: str) -> str:
    """The opening tag of one call."""
    return f'<{DSML}{INVOKE} name="{name}">'


PARAMETER_NAMED = f'<{DSML}{PARAMETER} name="'
"""The start of every argument's opening tag, up to its name."""


def parameter_open(name: str, is_string: bool) -> str:
    """The opening tag of one argument; `is_string` says the value is raw text, not JSON."""
    return f'{PARAMETER_NAMED}{name}" string="{"true" if is_string else "false"}">'
