"""Golden prompts of the deepseek_v41 native encoder (byte-checked against the public V4.1 encoder)."""

from __future__ import annotations

import pytest

from gateway.families.deepseek.modes import effort_budget, thinking_enabled
from gateway.families.deepseek.prompt import prompt_ends_in_reasoning, render_prompt
from gateway.types import ChatRequest

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
EFFORT = "Reasoning Effort: {} (range 1-100, the higher the value, the more thorough the reasoning)\n\n"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOLS_BLOCK = """

## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<｜DSML｜ calls>" block like the following:

<｜DSML｜ calls>
<｜DSML｜ invoke name="$TOOL_NAME">
<｜DSML｜ parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜ parameter>
...
</｜DSML｜ invoke>
<｜DSML｜ invoke name="$TOOL_NAME2">
...
</｜DSML｜ invoke>
</｜DSML｜ calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.

Otherwise, output directly after </think> with tool calls or final response.

### Available Tool Schemas

{"name": "get_weather", "description": "Weather.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
"""
TWO_CALLS = """<｜DSML｜ calls>
<｜DSML｜ invoke name="get_weather">
<｜DSML｜ parameter name="city" string="true">Paris</｜DSML｜ parameter>
</｜DSML｜ invoke>
<｜DSML｜ invoke name="get_weather">
<｜DSML｜ parameter name="city" string="true">Rome</｜DSML｜ parameter>
<｜DSML｜ parameter name="days" string="false">2</｜DSML｜ parameter>
</｜DSML｜ invoke>
</｜DSML｜ calls>"""


def call(call_id: str, **arguments) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}


TOOL_TURNS = [
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "Two calls.",
        "tool_calls": [call("a", city="Paris"), call("b", city="Rome", days=2)],
    },
    {"role": "tool", "tool_call_id": "b", "content": "sun"},
    {"role": "tool", "tool_call_id": "a", "content": "rain"},
    {"role": "user", "content": "Thanks"},
]


def render(thinking: bool = False, effort: int = 75, **kwargs) -> str:
    return render_prompt(ChatRequest(**kwargs), thinking, effort)


def test_chat_with_system():
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}]
    assert render(messages=messages) == f"{BOS}<｜System｜>Be terse.<｜User｜>Hi<｜Assistant｜></think>"


def test_thinking_writes_the_effort_line_first():
    assert (
        render(True, 100, messages=[{"role": "user", "content": "Hi"}])
        == f"{BOS}<｜System｜>{EFFORT.format(100)}<｜User｜>Hi<｜Assistant｜><think>"
    )
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}]
    assert (
        render(True, messages=messages)
        == f"{BOS}<｜System｜>{EFFORT.format(75)}Be terse.<｜User｜>Hi<｜Assistant｜><think>"
    )


def test_tools_response_format_history_and_sorted_results():
    prompt = render(True, messages=TOOL_TURNS, tools=[WEATHER], response_format={"type": "json_object"})
    assert prompt == (
        f"{BOS}<｜System｜>{EFFORT.format(75)}{TOOLS_BLOCK}\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
        '{"type": "object"}<｜User｜>Weather in Paris and Rome?<｜Assistant｜><think>Two calls.</think>\n\n'
        f"{TWO_CALLS}{EOS}<｜User｜><tool_result>rain</tool_result>\n\n<tool_result>sun</tool_result>\n\nThanks<｜Assistant｜><think>"
    )


def test_chat_history_has_no_reasoning_and_tool_choice_none_declares_no_tools():
    prompt = render(messages=TOOL_TURNS, tools=[WEATHER], tool_choice="none")
    assert prompt == (
        f"{BOS}<｜User｜>Weather in Paris and Rome?<｜Assistant｜></think>\n\n{TWO_CALLS}{EOS}"
        "<｜User｜><tool_result>rain</tool_result>\n\n<tool_result>sun</tool_result>\n\nThanks<｜Assistant｜></think>"
    )


def test_thinking_without_tools_drops_earlier_reasoning():
    messages = [
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "2", "reasoning_content": "easy"},
        {"role": "user", "content": "2+2?"},
    ]
    assert render(True, messages=messages) == (
        f"{BOS}<｜System｜>{EFFORT.format(75)}<｜User｜>1+1?<｜Assistant｜></think>2{EOS}<｜User｜>2+2?<｜Assistant｜><think>"
    )


def test_json_schema_response_format_alone():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    prompt = render(
        messages=[{"role": "user", "content": "n?"}],
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    )
    assert prompt == (
        f"{BOS}<｜System｜>\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
        '{"type": "object", "properties": {"n": {"type": "integer"}}}<｜User｜>n?<｜Assistant｜></think>'
    )


def test_generation_prompt_off_and_continued_final_message():
    user = {"role": "user", "content": "Hi"}
    assert render(messages=[user], add_generation_prompt=False) == f"{BOS}<｜User｜>Hi"
    prefill = {"role": "assistant", "content": "Hel", "reasoning_content": "greet"}
    request = ChatRequest(messages=[user, prefill], add_generation_prompt=False, continue_final_message=True)
    assert (
        render_prompt(request, True, 75)
        == f"{BOS}<｜System｜>{EFFORT.format(75)}<｜User｜>Hi<｜Assistant｜><think>greet</think>Hel"
    )
    assert not prompt_ends_in_reasoning(request, True)
    reasoning_only = ChatRequest(
        messages=[user, {"role": "assistant", "content": "", "reasoning_content": "hm"}], continue_final_message=True
    )
    assert render_prompt(reasoning_only, True, 75).endswith("<｜Assistant｜><think>hm")
    assert prompt_ends_in_reasoning(reasoning_only, True)


@pytest.mark.parametrize(
    "kwargs, effort, default, thinking, budget",
    [
        ({}, None, False, False, 75),
        ({}, None, True, True, 75),
        ({"thinking": True}, None, False, True, 75),
        ({"enable_thinking": True}, None, False, True, 75),
        ({"thinking": False}, "max", True, False, 100),
        ({}, "low", False, True, 50),
        ({}, "none", True, False, 75),
        ({"reasoning_effort": 30}, None, False, True, 30),
        ({}, "medium", False, True, 75),
    ],
)
def test_thinking_and_effort_resolution(kwargs, effort, default, thinking, budget):
    request = ChatRequest(messages=[], template_kwargs=kwargs, reasoning_effort=effort)
    assert thinking_enabled(request, default) is thinking
    assert effort_budget(request) == budget
