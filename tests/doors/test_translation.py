"""The doors' translations into the one internal chat request, without HTTP."""

from __future__ import annotations

import pytest

from gateway.errors import APIError
from gateway.validation.messages import parse_messages_request
from gateway.validation.responses import check_reasoning_followed, items_to_messages, parse_responses_request

CALL_ARGS = '{"city": "Paris"}'


def responses(**body):
    return parse_responses_request({"model": "m", **body})


def test_input_string_is_one_user_message():
    parsed = responses(input="hi", instructions="Be brief.")
    assert items_to_messages(parsed.items, parsed.instructions) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


def test_items_become_chat_turns():
    parsed = responses(
        input=[
            {"role": "developer", "content": "dev"},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
            },
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
            {"role": "assistant", "content": "Let me look."},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": CALL_ARGS},
            {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
        ]
    )
    assert items_to_messages(parsed.items, None) == [
        {"role": "system", "content": "dev"},
        {"role": "user", "content": "ab"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "reasoning_content": "thinking",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": {}}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
    ]
    assert all(item["id"] for item in parsed.items)


@pytest.mark.parametrize(
    "item",
    [
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "weighing"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "weighing"}]},
        {  # a whole output item as a Response gives it, its summary asked for
            "id": "rs_a",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "weighing"}],
            "content": [{"type": "reasoning_text", "text": "weighing"}],
        },
    ],
    ids=["content", "summary", "both"],
)
def test_a_reasoning_item_given_back_renders_with_content_or_summary(item):
    parsed = responses(input=[{"role": "user", "content": "q"}, item, {"role": "assistant", "content": "a"}])
    assert items_to_messages(parsed.items, None)[-1] == {
        "role": "assistant",
        "content": "a",
        "reasoning_content": "weighing",
    }


def test_every_input_item_keeps_the_id_it_came_with():
    """A client passes a response's output back as input, ids and all; input_items lists them by those ids (a
    message's id was replaced by a new one)."""
    given = [
        {"id": "msg_a", "type": "message", "role": "assistant", "status": "completed", "content": "hi"},
        {"id": "rs_a", "type": "reasoning", "summary": []},
        {"id": "fc_a", "type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"id": "fco_a", "type": "function_call_output", "call_id": "c", "output": "x"},
    ]
    assert [item["id"] for item in responses(input=given).items] == ["msg_a", "rs_a", "fc_a", "fco_a"]
    new = responses(input=[{"role": "user", "content": "hi"}, {"role": "user", "content": "hi"}]).items
    assert new[0]["id"].startswith("msg_") and new[0]["id"] != new[1]["id"]


def test_a_json_schema_format_is_repeated_with_its_description_null_when_none_was_given():
    """OpenAI's Response repeats `description: null`; OpenResponses' JsonSchemaResponseFormat requires the key."""
    schema = {"type": "object"}
    parsed = responses(input="x", text={"format": {"type": "json_schema", "name": "s", "schema": schema}})
    assert parsed.echo["text"]["format"] == {
        "type": "json_schema",
        "description": None,
        "name": "s",
        "schema": schema,
        "strict": False,
    }
    described = {"type": "json_schema", "name": "s", "schema": schema, "description": "d", "strict": True}
    assert responses(input="x", text={"format": described}).echo["text"]["format"]["description"] == "d"


def thought(text: str, rid: str = "rs_1") -> dict:
    return {"type": "reasoning", "id": rid, "summary": [{"type": "summary_text", "text": text}]}


@pytest.mark.parametrize(
    "items, at",
    [
        ([{"role": "user", "content": "q"}, thought("t")], 1),  # at the end: nothing to follow
        ([{"role": "user", "content": "q"}, thought("t"), thought("u", "rs_2"), {"role": "user", "content": "r"}], 1),
    ],
)
def test_a_reasoning_item_without_its_following_output_is_refused_in_openais_words(items, at):
    """OpenAI: "Item 'rs_…' of type 'reasoning' was provided without its required following item." (param
    `input`); it would have been dropped, or joined a later assistant turn."""
    with pytest.raises(APIError) as error:
        check_reasoning_followed(responses(input=items).items)
    assert error.value.param == f"input[{at}]"
    assert error.value.message == "Item 'rs_1' of type 'reasoning' was provided without its required following item."


def test_reasoning_joins_its_own_turn_and_the_reasoning_between_text_and_calls_is_kept_whole():
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    items = responses(
        input=[thought("a"), {"role": "assistant", "content": "On it."}, thought("b", "rs_2"), call]
    ).items
    check_reasoning_followed(items)
    assert items_to_messages(items, None)[0]["reasoning_content"] == "a\nb"  # the second no longer replaces the first
    # a stored response cut during its reasoning: no later turn takes that reasoning
    cut = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]}, thought("cut")]
    later = responses(input=[{"role": "user", "content": "again"}, {"role": "assistant", "content": "ok"}]).items
    assert "reasoning_content" not in items_to_messages(cut + later, None)[-1]


def test_a_function_tool_omitting_strict_is_repeated_strict_where_its_schema_allows():
    """OpenAI's Responses default (FunctionToolParam: "Default `true`"; strict where the schema can be, else best
    effort); a strict the client gave is repeated as given."""
    plain = {"type": "object", "properties": {"a": {"type": "string"}}}
    negated = {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}
    tools = [
        {"type": "function", "name": "p", "parameters": plain},
        {"type": "function", "name": "n", "parameters": negated, "strict": None},
        {"type": "function", "name": "f", "parameters": plain, "strict": False},
    ]
    assert [t["strict"] for t in responses(input="x", tools=tools).echo["tools"]] == [True, False, False]


def test_a_call_without_a_message_before_it_opens_an_assistant_turn():
    parsed = responses(input=[{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}])
    assert items_to_messages(parsed.items, None) == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}],
        }
    ]


def test_responses_fields_map_to_chat_and_settings():
    tool = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}, "strict": True}
    parsed = responses(
        input="x",
        tools=[tool, {**tool, "name": "g"}],
        tool_choice={"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "g"}]},
        parallel_tool_calls=False,
        text={"format": {"type": "json_object"}},
        reasoning={"effort": "low"},
        max_output_tokens=17,
        temperature=0.5,
        top_p=0,
        include=["message.output_text.logprobs"],
        metadata={"k": "v"},
        store=False,
    )
    assert [t["function"]["name"] for t in parsed.tools] == ["g"] and parsed.tool_choice == "required"
    assert parsed.parallel_tool_calls is False and parsed.response_format == {"type": "json_object"}
    assert parsed.reasoning_effort == "low" and parsed.store is False and parsed.metadata == {"k": "v"}
    s = parsed.settings
    assert (s.max_tokens, s.temperature, s.top_p, s.top_k, s.logprobs) == (17, 0.5, 1.0, 1, True)
    assert [t["name"] for t in parsed.echo["tools"]] == ["f", "g"] and parsed.echo["top_p"] == 0


def test_anthropic_request_maps_to_chat():
    parsed = parse_messages_request(
        {
            "model": "m",
            "max_tokens": 30_000,
            "system": [{"type": "text", "text": "sys"}],
            "stop_sequences": ["END"],
            "top_p": 0.95,  # the least Anthropic takes with thinking on
            "thinking": {"type": "enabled", "budget_tokens": 20_000},
            "tools": [{"name": "f", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},  # forced is refused with thinking
            "messages": [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hm", "signature": "s"},
                        {"type": "text", "text": "Calling."},
                        {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "ok"}]},
                        {"type": "text", "text": "and?"},
                    ],
                },
            ],
        }
    )
    chat, settings = parsed.chat, parsed.settings
    assert chat.messages == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "Calling.",
            "reasoning_content": "hm",
            "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "ok"},
        {"role": "user", "content": "and?"},
    ]
    assert chat.tool_choice == "auto" and chat.parallel_tool_calls is False
    assert chat.template_kwargs == {"enable_thinking": True, "thinking": True} and chat.reasoning_effort == "high"
    assert (settings.max_tokens, settings.stop, settings.top_p) == (30_000, ["END"], 0.95)


THINKING_ON = ({"type": "enabled", "budget_tokens": 1024}, {"type": "adaptive"})


@pytest.mark.parametrize("thinking", THINKING_ON, ids=["enabled", "adaptive"])
@pytest.mark.parametrize(
    "sampling, param, words",
    [
        ({"temperature": 0.5}, "temperature", "`temperature` may only be set to 1 when thinking is enabled"),
        ({"temperature": 0}, "temperature", "`temperature` may only be set to 1"),
        ({"top_k": 5}, "top_k", "`top_k` must be unset when thinking is enabled."),
        ({"top_k": 0}, "top_k", "`top_k` must be unset"),
        ({"top_p": 0.9}, "top_p", "`top_p` must be between 0.95 and 1"),
    ],
)
def test_thinking_refuses_sampling_changes_as_anthropic_does(thinking, sampling, param, words):
    """Anthropic's extended-thinking guide: thinking is not compatible with temperature or top_k changes, and
    top_p only from 0.95 to 1 (its 400s: "`temperature` may only be set to 1 when thinking is enabled or in
    adaptive mode", "`top_k` must be unset when thinking is enabled")."""
    body = {"model": "m", "max_tokens": 2048, "messages": [ASKED], "thinking": thinking, **sampling}
    with pytest.raises(APIError) as error:
        parse_messages_request(body)
    assert error.value.param == param and words in error.value.message
    del body["thinking"]  # the same sampling without thinking is taken
    parse_messages_request(body)


@pytest.mark.parametrize("thinking", THINKING_ON, ids=["enabled", "adaptive"])
def test_thinking_takes_its_default_sampling_spelled_out(thinking):
    body = {"model": "m", "max_tokens": 2048, "messages": [ASKED], "thinking": thinking}
    settings = parse_messages_request({**body, "temperature": 1, "top_p": 1}).settings
    assert (settings.temperature, settings.top_p, settings.top_k) == (1, 1, -1)


ASKED = {"role": "user", "content": "q"}
THOUGHT = {"type": "thinking", "thinking": "hm", "signature": "s"}
CALLED = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}
RESULT = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}


@pytest.mark.parametrize(
    "messages, extra, param",
    [
        ([{"role": "user", "content": ""}], {}, "messages[0].content"),
        ([{"role": "user", "content": []}], {}, "messages[0].content"),
        ([ASKED, {"role": "assistant", "content": ""}, ASKED], {}, "messages[1].content"),
        ([{"role": "user", "content": [{"type": "text", "text": ""}]}], {}, "messages[0].content[0].text"),
        ([ASKED], {"system": [{"type": "text", "text": ""}]}, "system[0].text"),
        ([{"role": "user", "content": [RESULT]}], {}, "messages[0].content[0].tool_use_id"),
        (
            [ASKED, CALLED, {"role": "user", "content": [{**RESULT, "tool_use_id": "t2"}]}],
            {},
            "messages[2].content[0].tool_use_id",
        ),
        ([ASKED, CALLED, ASKED], {}, "messages[1].content"),
        ([ASKED, CALLED, ASKED, {"role": "user", "content": [RESULT]}], {}, "messages[3].content[0]"),
        (
            [
                ASKED,
                CALLED,
                {"role": "user", "content": [RESULT]},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [RESULT]},
            ],
            {},
            "messages[4].content[0].tool_use_id",
        ),
        ([ASKED], {"stop_sequences": [str(i) for i in range(65)]}, "stop_sequences"),
        ([ASKED], {"stop_sequences": ["END", "END", "\n\n"]}, "stop_sequences[2]"),  # Anthropic: non-whitespace
        ([ASKED], {"stop_sequences": " "}, "stop_sequences"),
        ([{"role": "user", "content": [{"type": "text", "text": " \n"}]}], {}, "messages[0].content[0].text"),
        ([ASKED], {"system": [{"type": "text", "text": "\t"}]}, "system[0].text"),
        ([{"role": "user", "content": "  "}, {"role": "assistant", "content": "ok"}], {}, "messages[0].content"),
        (
            [ASKED, CALLED, {"role": "user", "content": [RESULT, RESULT]}],
            {},
            "messages[2].content[1].tool_use_id",
        ),
        (
            [ASKED, CALLED, {"role": "user", "content": [RESULT]}, {"role": "user", "content": [RESULT]}],
            {},
            "messages[3].content[0].tool_use_id",
        ),
        ([ASKED, {"role": "assistant", "content": CALLED["content"] * 2}], {}, "messages[1].content[1].id"),
        ([ASKED, CALLED, {"role": "user", "content": [RESULT]}, CALLED], {}, "messages[3].content[0].id"),
        *(  # Anthropic: "The final block in an assistant message cannot be `thinking`." (a prefill is text)
            ([ASKED, {"role": "assistant", "content": [THOUGHT, *blocks]}], {}, "messages[1].content")
            for blocks in ([], [{"type": "text", "text": "so"}, {"type": "redacted_thinking", "data": "d"}])
        ),
        ([ASKED], {"tools": [{"name": "files.read", "input_schema": {"type": "object"}}]}, "tools[0].name"),
        ([ASKED], {"tools": [{"name": "a:b", "input_schema": {"type": "object"}}]}, "tools[0].name"),
        ([ASKED], {"tools": [{"name": "x" * 129, "input_schema": {"type": "object"}}]}, "tools[0].name"),
        (
            [ASKED, CALLED, {"role": "user", "content": [{"type": "text", "text": "so?"}, RESULT]}],
            {},
            "messages[2].content[1]",
        ),
        (
            [ASKED, {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}]}],
            {},
            "messages[1].content[0].signature",
        ),
        (
            [ASKED, {"role": "assistant", "content": [{"type": "redacted_thinking"}, {"type": "text", "text": "ok"}]}],
            {},
            "messages[1].content[0].data",
        ),
    ],
)
def test_anthropic_errors_name_the_param(messages, extra, param):
    """Anthropic's rules: non-empty content (but a last assistant turn) and text blocks of more than whitespace, a
    tool_result answering a tool_use of the turn before (once), every tool_use answered in the next turn, tool_use
    ids unique in the conversation, tool names of letters, digits, '_' and '-' (at most 128), a thinking block's
    signature and a redacted_thinking block's data."""
    with pytest.raises(APIError) as e:
        parse_messages_request({"model": "m", "max_tokens": 5, "messages": messages, **extra})
    assert e.value.status == 400 and e.value.param == param


def test_a_last_assistant_turn_of_thinking_then_text_is_a_prefill_that_keeps_its_thinking():
    """Anthropic refuses a last assistant turn that ends in thinking (above); thinking then text is a prefill: its
    text is continued, its thinking kept as the turn's reasoning. Anthropic's rule that with thinking on the final
    assistant turn of a tool loop opens with a thinking block ("Expected `thinking` or `redacted_thinking`, but found
    `text`") is not enforced: it guards Claude's signed thinking (README's Messages section says why)."""
    prefill = {"role": "assistant", "content": [THOUGHT, {"type": "text", "text": "It is"}]}
    chat = parse_messages_request({"model": "m", "max_tokens": 5, "messages": [ASKED, prefill]}).chat
    assert chat.continue_final_message and not chat.add_generation_prompt
    assert (chat.messages[-1]["content"], chat.messages[-1]["reasoning_content"]) == ("It is", "hm")
    loop = [ASKED, CALLED, {"role": "user", "content": [RESULT]}]
    thinking = {"type": "enabled", "budget_tokens": 1024}
    parse_messages_request({"model": "m", "max_tokens": 2048, "messages": loop, "thinking": thinking})


def test_anthropic_rules_that_hold():
    """A last assistant turn may be empty (a prefill) or leave its tool_use open; stop_sequences past OpenAI's 4."""
    both = {"role": "assistant", "content": [*CALLED["content"], {**CALLED["content"][0], "id": "t2"}]}
    for messages in (
        [ASKED, {"role": "assistant", "content": ""}],
        [ASKED, CALLED],
        # consecutive messages of a role are one turn, as Anthropic combines them
        [
            ASKED,
            both,
            {"role": "user", "content": [RESULT]},
            {"role": "user", "content": [{**RESULT, "tool_use_id": "t2"}]},
        ],
        [ASKED, CALLED, {"role": "assistant", "content": "Checking."}, {"role": "user", "content": [RESULT]}],
    ):
        parse_messages_request({"model": "m", "max_tokens": 5, "messages": messages})
    tool = {"name": "x" * 128, "input_schema": {"type": "object"}}
    parse_messages_request({"model": "m", "max_tokens": 5, "messages": [ASKED], "tools": [tool]})
    stops = [str(i) for i in range(64)]
    parsed = parse_messages_request({"model": "m", "max_tokens": 5, "messages": [ASKED], "stop_sequences": stops})
    assert parsed.settings.stop == stops


@pytest.mark.parametrize(
    "body, param",
    [
        ({"max_output_tokens": 15}, "max_output_tokens"),
        ({"input": None}, "input"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        ({"input": [{"type": "message", "role": "user"}]}, "input[0].content"),
        ({"metadata": {"k": 1}}, "metadata"),
        ({"text": {"format": {"type": "json_schema", "name": "s"}}}, "text.format.schema"),
        ({"tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]}, "tools[1].name"),
    ],
)
def test_responses_errors_name_the_param(body, param):
    with pytest.raises(APIError) as e:
        responses(**{"input": "x", **body})
    assert e.value.status == 400 and e.value.param == param
