"""The control tokens of Kimi's formats: K3's XTML (and its attribute escaping), K2's tool-call sections."""

from __future__ import annotations

from gateway.families.token_sections import SectionMarkers

OPEN = "<|open|>"
CLOSE = "<|close|>"
SEP = "<|sep|>"
END_OF_MSG = "<|end_of_msg|>"

MARKERS = frozenset({OPEN, CLOSE, SEP})
"""The three structural control tokens; only their token ids are structure, never their spelling."""
SPELLINGS = (OPEN, CLOSE, SEP, END_OF_MSG)
"""Every control token a grammar must keep out of its text regions."""


def escape_attr(value: str) -> str:
    """An attribute value as K3 writes it: `&` → `&amp;`, then `"` → `&quot;`."""
    return value.replace("&", "&amp;").replace('"', "&quot;")


def unescape_attr(value: str) -> str:
    """The inverse of `escape_attr`: `&quot;` → `"`, then `&amp;` → `&`."""
    return value.replace("&quot;", '"').replace("&amp;", "&")


IM_END = "<|im_end|>"
K2_SECTIONS = SectionMarkers(
    section_begin="<|tool_calls_section_begin|>",
    section_end="<|tool_calls_section_end|>",
    call_begin="<|tool_call_begin|>",
    call_end="<|tool_call_end|>",
    arguments_begin="<|tool_call_argument_begin|>",
    ignored=frozenset({IM_END}),
)
"""K2 / K2-Instruct / K2.6 calls: `<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>`."""
