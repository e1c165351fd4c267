"""Output grammars for the hermes family, as xgrammar structural tags (`gateway.grammars.tool_calls`).

A call is Qwen's layout, `<tool_call>\\n{"name": NAME, "arguments": ARGS}\\n</tool_call>`; JSON is compact
(one line, ", " and ": "; gateway/grammars/json.py), so a weak model cannot fill its budget with whitespace
inside arguments. `<tool_call>`, `</tool_call>`, `<think>` and `</think>` are their token ids where the vocabulary
has them (Qwen2.5 / Qwen3: the tool-call tokens; Qwen3: the think tokens too), text where it does not (SmolLM2).
No JSON string in the arguments holds the first characters of those markers or of a special token (`<tool`,
`<|im_`…) unescaped (`gateway.grammars.safe_json`), so no value can hold the tokens themselves.

Policy (`tool_calls`'): tool_choice "auto": lazy calls in free text; "required" or a named tool: calls only
(after an optional reasoning block); a named tool or `parallel_tool_calls=false`: one call. response_format
json: the answer is that JSON; with tools and "auto", EITHER calls OR the JSON. A prompt that opened `<think>`
gets a reasoning block up to `</think>` first, so constraints apply to the answer, never to the reasoning.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.families.chatml_tokens import THINK_END, THINK_START, TOOL_CALL_END, TOOL_CALL_START
from gateway.grammars.reasoning import ThinkBlock
from gateway.grammars.tool_calls import CallBody, CallFormat, arguments_format


def call_body(tool: dict[str, Any], param: str, spellings: tuple[str, ...]) -> CallBody:
    """One call of `tool` between the markers: its name, then arguments by its schema (an object at least), no
    string spelling one of `spellings`."""
    name = json.dumps(tool["function"]["name"], ensure_ascii=False)
    return CallBody(f'\n{{"name": {name}, "arguments": ', arguments_format(tool, param, spellings), "}\n")


CALLS = CallFormat(
    TOOL_CALL_START, TOOL_CALL_END, call_body, TOOL_CALL_START, ThinkBlock(THINK_START, THINK_END, "\n\n")
)
