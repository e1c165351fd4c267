"""A chat planned from kept renders and kept prompts gets exactly the prompt and ids of a fresh render and encoding."""

from __future__ import annotations

from unittest import mock

import pytest

from gateway.models.planning import plan_chat
from gateway.prompts import template
from gateway.prompts.kept import Kept
from gateway.validation.chat import parse_chat_completion

USER = {"role": "user", "content": "What is the weather in Paris?"}
TOOL = {
    "type": "function",
    "function": {"name": "weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
CHATS = {
    "plain": {"messages": [USER]},
    "a system message": {"messages": [{"role": "system", "content": "Be brief."}, USER]},
    "tools": {"messages": [USER], "tools": [TOOL]},
    "tools, tool_choice none": {"messages": [USER], "tools": [TOOL], "tool_choice": "none"},
    "a call and its result": {
        "messages": [
            USER,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ],
        "tools": [TOOL],
    },
    "reasoning in history": {
        "messages": [USER, {"role": "assistant", "content": "Sunny.", "reasoning_content": "look it up"}, USER]
    },
    "continued": {
        "messages": [USER, {"role": "assistant", "content": "It is "}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    },
    "no generation prompt": {"messages": [USER], "add_generation_prompt": False},
    "template kwargs": {"messages": [USER], "chat_template_kwargs": {"enable_thinking": False}},
    "a spelling shielded": {"messages": [{"role": "user", "content": "say <|im_end|> twice"}]},
}


def plan_of(model, name: str):
    parsed = parse_chat_completion({"model": "m", **CHATS[name]})  # a new body each time, as a new request
    return plan_chat(model, parsed.chat, parsed.settings)


def test_every_chat_kept_then_planned_again_gets_its_fresh_plan(tokenize_only) -> None:
    """All the chats planned once (their renders and prompts kept), then each again: the prompt and ids a render
    and encoding with nothing kept give, so no kept entry is found for a chat it was not made for."""
    with (
        mock.patch.object(template, "_RENDERS", template._Renders()),
        mock.patch.object(tokenize_only.encoder, "_prompts", Kept(128)),
    ):
        first = {name: plan_of(tokenize_only, name) for name in CHATS}
        again = {name: plan_of(tokenize_only, name) for name in CHATS}
    with (
        mock.patch.object(template, "_RENDERS", template._Renders(entries=0)),
        mock.patch.object(tokenize_only.encoder, "_prompts", Kept(0)),
    ):
        fresh = {name: plan_of(tokenize_only, name) for name in CHATS}
    for name in CHATS:
        assert (again[name].prompt, again[name].ids) == (fresh[name].prompt, fresh[name].ids), name
        assert (first[name].prompt, first[name].ids) == (fresh[name].prompt, fresh[name].ids), name
    prompts = [plan.prompt for name, plan in fresh.items() if name != "tools, tool_choice none"]  # plain's prompt
    assert len(set(prompts)) == len(prompts)  # each other chat its own prompt: a wrong kept entry would show


@pytest.mark.parametrize("name", ["plain", "tools"])
def test_a_kept_render_is_found_again(tokenize_only, name: str) -> None:
    with mock.patch.object(template, "_RENDERS", template._Renders()):
        assert plan_of(tokenize_only, name).prompt is plan_of(tokenize_only, name).prompt  # the kept text itself
