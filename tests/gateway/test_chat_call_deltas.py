"""A chat step's delta for a tool call's fragments: a named call's next arguments alone, a call's first fragment
with its id and name (also one never announced), text with the fragment kept beside it."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.api.chat import ChatRenderer
from gateway.families.base import OutputParser
from gateway.types import ChoiceStep, Delta, Piece


class _Scripted(OutputParser):
    """Each feed hands out the next step's deltas (the renderer's input, without a family)."""

    def __init__(self, steps: list[list[Delta]]) -> None:
        self._steps = iter(steps)

    def feed(self, pieces: Sequence[Piece]) -> list[Delta]:
        return next(self._steps)

    def finish(self) -> list[Delta]:
        return []

    @property
    def saw_tool_call(self) -> bool:
        return True


def test_call_fragments_render_as_openai_tool_call_deltas():
    steps = [
        [Delta(tool_index=0, tool_id="call_a", tool_name="f", tool_arguments='{"x": "')],
        [Delta(tool_index=0, tool_arguments="ab")],
        [Delta(tool_index=0, tool_arguments="")],
        [Delta(tool_index=1, tool_arguments="{")],  # a call whose first fragment came without its id and name
        [Delta(content="c", tool_index=1, tool_arguments="}")],
    ]
    renderer = ChatRenderer(1, lambda: _Scripted(steps), None, 3, lambda text: 0)
    deltas = [renderer.step(0, ChoiceStep([Piece("t")], completion_tokens=n))[0]["delta"] for n in range(1, 6)]
    assert deltas[0] == {
        "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": '{"x": "'}}
        ]
    }
    assert deltas[1] == {"tool_calls": [{"index": 0, "function": {"arguments": "ab"}}]}
    assert deltas[2] == {"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}
    first = deltas[3]["tool_calls"][0]
    assert first["id"].startswith("call_") and first["function"] == {"name": "", "arguments": "{"}
    assert deltas[4] == {"content": "c", "tool_calls": [{"index": 1, "function": {"arguments": "}"}}]}
