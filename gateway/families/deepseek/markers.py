"""Spellings of the DeepSeek control tokens and of each version's DSML tag names (V3.2, V4, V4.1).

V3 and V3.1 write calls with their own tool-call tokens (`TOOL_CALLS_BEGIN` …); from V3.2 on calls are DSML
tags, each opened with `<` or `</` and the `｜DSML｜` token; the versions differ in the words after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from gateway.families.token_sections import SectionMarkers

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
SYSTEM = "<｜System｜>"  # plain text with the V4 tokenizer: it has no token for it
THINK_START = "<think>"
THINK_END = "</think>"
DSML = "｜DSML｜"

TOOL_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
TOOL_CALLS_END = "<｜tool▁calls▁end｜>"
TOOL_CALL_BEGIN = "<｜tool▁call▁begin｜>"
TOOL_CALL_END = "<｜tool▁call▁end｜>"
TOOL_SEP = "<｜tool▁sep｜>"
SECTIONS = SectionMarkers(
    TOOL_CALLS_BEGIN, TOOL_CALLS_END, TOOL_CALL_BEGIN, TOOL_CALL_END, TOOL_SEP, ignored=frozenset({EOS})
)
"""V3 / V3.1 calls: `<｜tool▁calls▁begin｜>` (`<｜tool▁call▁begin｜>` … `<｜tool▁sep｜>` … `<｜tool▁call▁end｜>`)+."""


@dataclass(frozen=True)
class Dialect:
    """How one DSML version spells its tags: the words after `｜DSML｜`."""

    calls: str
    invoke: str
    parameter: str

    @cached_property
    def calls_open(self) -> str:
        return f"<{DSML}{self.calls}>"

    @cached_property
    def calls_close(self) -> str:
        return f"</{DSML}{self.calls}>"

    @cached_property
    def invoke_close(self) -> str:
        return f"</{DSML}{self.invoke}>"

    @cached_property
    def parameter_close(self) -> str:
        return f"</{DSML}{self.parameter}>"

    @cached_property
    def parameter_named(self) -> str:
        """The start of every argument's opening tag, up to its name."""
        return f'<{DSML}{self.parameter} name="'

    def invoke_open(self, name: str) -> str:
        """The opening tag of one call."""
        return f'<{DSML}{self.invoke} name="{name}">'

    def parameter_open(self, name: str, is_string: bool) -> str:
        """The opening tag of one argument; `is_string` says the value is raw text, not JSON."""
        return f'{self.parameter_named}{name}" string="{"true" if is_string else "false"}">'


V32 = Dialect("function_calls", "invoke", "parameter")
V4 = Dialect("tool_calls", "invoke", "parameter")
V41 = Dialect(" calls", " invoke", " parameter")

CALLS_OPEN = V41.calls_open
CALLS_CLOSE = V41.calls_close
INVOKE_CLOSE = V41.invoke_close
PARAMETER_CLOSE = V41.parameter_close

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
