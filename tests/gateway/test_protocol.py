"""Validation of chat and completions bodies: normalized output, and every error with its param."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import APIError
from gateway.validation.chat import EMPTY_PARAMETERS, MESSAGE, _message, _plain_message, parse_chat_completion
from gateway.validation.completions import MAX_CHOICES, parse_completion
from gateway.validation.declare import Obj, array, boolean, integer, number, obj, refused, string
from gateway.validation.fields import MAX_N, Fields, Reads
from gateway.validation.schema_bounds import MAX_DEPTH

USER = {"role": "user", "content": "hi"}
TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


CALLING = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
}
CALL_2 = {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
ANSWER = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}


def chat(**fields):
    return {"model": "m", "messages": [USER], **fields}


def nested(depth: int):
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def test_minimal_chat_defaults():
    req = parse_chat_completion(chat())
    assert req.model == "m" and req.chat.messages == [{"role": "user", "content": "hi"}]
    s = req.settings
    assert (s.n, s.max_tokens, s.stop, s.stream, s.logprobs, s.temperature) == (1, None, [], False, False, 1.0)
    assert req.chat.tool_choice == "auto" and req.chat.tools == []


def test_messages_are_normalized():
    req = parse_chat_completion(
        chat(
            messages=[
                {"role": "developer", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
                USER,
                {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "think",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
            ]
        )
    )
    system, _, assistant, tool = req.chat.messages
    assert system == {"role": "system", "content": "be brief"}
    assert assistant["tool_calls"][0]["function"] == {"name": "f", "arguments": {"x": 1}}
    assert assistant["content"] is None and assistant["reasoning_content"] == "think"
    assert tool == {"role": "tool", "content": "42", "tool_call_id": "c1"}


def test_an_assistant_reasoning_under_vllms_name_reaches_the_template():
    """vLLM names the reasoning field `reasoning` (renamed from `reasoning_content`, vllm#27752), and clients written
    for it send the history so: that field was ignored as unknown, and the model lost its earlier reasoning."""
    said = {"role": "assistant", "content": "Sunny."}
    for given in (
        {"reasoning": "think"},
        {"reasoning_content": "think"},
        {"reasoning": "think", "reasoning_content": "think"},
    ):
        req = parse_chat_completion(chat(messages=[USER, {**said, **given}, USER]))
        assert req.chat.messages[1] == {**said, "reasoning_content": "think"}
    with pytest.raises(APIError) as e:
        parse_chat_completion(chat(messages=[USER, {**said, "reasoning": "a", "reasoning_content": "b"}, USER]))
    assert e.value.param == "messages[1].reasoning"


def test_an_assistant_refusal_part_is_its_text_and_only_an_assistant_may_hold_one():
    """OpenAI's assistant content holds text and refusal parts; a replayed refusal part was a 400."""
    refusal = {"type": "refusal", "refusal": "I can't."}
    parts = [{"type": "text", "text": "Sorry. "}, refusal]
    req = parse_chat_completion(chat(messages=[USER, {"role": "assistant", "content": parts}, USER]))
    assert req.chat.messages[1] == {"role": "assistant", "content": "Sorry. I can't."}
    for bad, param in (({**refusal, "refusal": 5}, "messages[1].content[0].refusal"), ({"type": "image"}, None)):
        with pytest.raises(APIError) as e:
            parse_chat_completion(chat(messages=[USER, {"role": "assistant", "content": [bad]}]))
        assert e.value.param == (param or "messages[1].content[0].type")
    with pytest.raises(APIError) as e:
        parse_chat_completion(chat(messages=[{"role": "user", "content": [refusal]}]))
    assert e.value.param == "messages[0].content[0].type"


def test_what_openai_allows_without_tools_or_assistant_content():
    """tool_choice 'none' without tools (vLLM allows it on purpose: Semantic Kernel always sends it); an assistant
    message with a refusal, a legacy function_call, an empty string, or tool_calls and no content."""
    assert parse_chat_completion(chat(tool_choice="none", parallel_tool_calls=None)).chat.tool_choice == "none"
    for assistant, content in (
        ({"refusal": "I can't."}, "I can't."),
        ({"content": [], "refusal": "No."}, "No."),
        ({"content": None, "function_call": {"name": "f", "arguments": "{}"}}, None),
        ({"content": ""}, ""),
        ({"content": None, "tool_calls": CALLING["tool_calls"]}, None),
    ):
        messages = parse_chat_completion(chat(messages=[USER, {"role": "assistant", **assistant}])).chat.messages
        assert messages[1]["content"] == content


def test_tools_and_choices():
    bare = {"type": "function", "function": {"name": "now"}}
    req = parse_chat_completion(chat(tools=[TOOL, bare], tool_choice={"type": "function", "function": {"name": "now"}}))
    assert req.chat.tools[1]["function"]["parameters"] == EMPTY_PARAMETERS
    assert req.chat.tool_choice == {"type": "function", "function": {"name": "now"}}
    allowed = {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "now"}}]},
    }
    req = parse_chat_completion(chat(tools=[TOOL, bare], tool_choice=allowed))
    assert req.chat.tool_choice == "required" and [t["function"]["name"] for t in req.chat.tools] == ["now"]


def test_settings():
    req = parse_chat_completion(
        chat(
            max_tokens=5,
            max_completion_tokens=7,
            n=3,
            stop="END",
            seed=1,
            temperature=0,
            top_p=0,
            top_k=0,
            logprobs=True,
            top_logprobs=2,
            stream=True,
            stream_options={"include_usage": True},
            ignore_eos=True,
            min_tokens=4,
            include_stop_str_in_output=True,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
            },
            reasoning_effort="low",
            chat_template_kwargs={"enable_thinking": False},
            user="u",
            store=False,
            service_tier="auto",
            safety_identifier="s",
            prompt_cache_key="k",
            verbosity="low",
            some_vendor_field=1,
            repetition_penalty=1.0,
            use_beam_search=False,
            bad_words=[],
        )
    )
    s = req.settings
    assert (s.max_tokens, s.n, s.stop, s.seed, s.top_k, s.top_p, s.top_logprobs, s.include_usage) == (
        7,
        3,
        ["END"],
        1,
        1,
        1.0,
        2,
        True,
    )
    assert (s.min_tokens, s.include_stop_str_in_output) == (4, True)  # vLLM's
    assert req.chat.response_format["json_schema"]["strict"] is True
    assert req.chat.template_kwargs == {"enable_thinking": False} and req.chat.reasoning_effort == "low"


@pytest.mark.parametrize(
    "body, param",
    [
        ({"messages": [USER]}, "model"),
        (chat(messages=None), "messages"),
        (chat(messages=[]), "messages"),
        (chat(messages="hi"), "messages"),
        (chat(messages=[{"content": "x"}]), "messages[0].role"),
        (chat(messages=[{"role": "wizard", "content": "x"}]), "messages[0].role"),
        (chat(messages=[{"role": "user"}]), "messages[0].content"),
        (chat(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
        (chat(messages=[{"role": "user", "content": []}]), "messages[0].content"),
        (
            chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
            "messages[0].content[0]",
        ),
        (chat(messages=[{"role": "user", "content": [{"type": "text"}]}]), "messages[0].content[0].text"),
        (chat(messages=[{"role": "user", "content": [{"type": "mystery"}]}]), "messages[0].content[0].type"),
        (chat(messages=[{"role": "tool", "content": "x"}]), "messages[0].tool_call_id"),
        (
            chat(
                messages=[
                    {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{bad"}}]}
                ]
            ),
            "messages[0].tool_calls[0].function.arguments",
        ),
        (
            chat(
                messages=[
                    {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}]}
                ]
            ),
            "messages[0].tool_calls[0].function.arguments",
        ),
        (
            chat(messages=[{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}]),
            "messages[0].tool_calls[0].id",
        ),
        (chat(tools=[{"type": "web_search"}]), "tools[0].type"),
        (chat(tools=[{"type": "function", "function": {"name": "has space"}}]), "tools[0].function.name"),
        (chat(tools=[TOOL, TOOL]), "tools[1].function.name"),
        (
            chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]),
            "tools[0].function.parameters",
        ),
        (
            chat(
                tools=[
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"properties": {"a": {"type": "strnig"}}}},
                    }
                ]
            ),
            "tools[0].function.parameters.properties.a.type",
        ),
        (
            chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {"required": "a"}}}]),
            "tools[0].function.parameters.required",
        ),
        (
            chat(
                tools=[{"type": "function", "function": {"name": "f", "parameters": {"properties": nested(MAX_DEPTH)}}}]
            ),
            "tools[0].function.parameters",
        ),
        (chat(tool_choice="always"), "tool_choice"),
        (chat(tool_choice="required"), "tool_choice"),
        (chat(tool_choice="auto"), "tool_choice"),
        (chat(tools=[], tool_choice={"type": "function", "function": {"name": "f"}}), "tool_choice"),
        (chat(parallel_tool_calls=False), "parallel_tool_calls"),
        (chat(messages=[USER, {"role": "assistant"}, USER]), "messages[1].content"),
        (chat(messages=[USER, {"role": "assistant", "content": None, "tool_calls": []}]), "messages[1].content"),
        (chat(messages=[USER, {"role": "assistant", "content": []}]), "messages[1].content"),
        (chat(messages=[USER, {"role": "assistant", "content": "x", "refusal": 5}]), "messages[1].refusal"),
        (
            chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "nope"}}),
            "tool_choice.function.name",
        ),
        (chat(tools=[TOOL], tool_choice={"type": "allowed_tools"}), "tool_choice.allowed_tools"),
        (
            chat(tools=[TOOL], tool_choice={"type": "allowed_tools", "allowed_tools": {"tools": []}}),
            "tool_choice.allowed_tools.tools",
        ),
        (chat(response_format={"type": "yaml"}), "response_format.type"),
        (chat(response_format={"type": "json_schema"}), "response_format.json_schema"),
        (
            chat(response_format={"type": "json_schema", "json_schema": {"schema": {}}}),
            "response_format.json_schema.name",
        ),
        (
            chat(response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": []}}),
            "response_format.json_schema.schema",
        ),
        (chat(max_tokens=0), "max_tokens"),
        (chat(max_completion_tokens="9"), "max_completion_tokens"),
        (chat(max_completion_tokens=5, max_tokens=0), "max_tokens"),  # the older name is checked too
        (chat(messages=[{"role": "bogus"}, "x"]), "messages[1]"),  # no object among them: named before any is read
        (chat(n=0), "n"),
        (chat(n=MAX_N + 1), "n"),
        (chat(stop=["a", "b", "c", "d", "e"]), "stop"),
        (chat(stop=["a", ""]), "stop[1]"),
        (chat(stop=7), "stop"),
        (chat(temperature=2.5), "temperature"),
        (chat(temperature=True), "temperature"),
        (chat(top_p=1.5), "top_p"),
        (chat(min_p=-0.1), "min_p"),
        (chat(top_k=-2), "top_k"),
        (chat(frequency_penalty=3), "frequency_penalty"),
        (chat(presence_penalty=-3), "presence_penalty"),
        (chat(seed=1.5), "seed"),
        (chat(n=1.5), "n"),
        (chat(n=True), "n"),
        (chat(n=17.0), "n"),
        (chat(max_tokens=16.5), "max_tokens"),
        (chat(max_tokens=0.0), "max_tokens"),
        (chat(max_tokens=1e300), "max_tokens"),
        (chat(seed=1 << 64), "seed"),
        (chat(seed=orjson.loads(b"-9223372036854775809")), "seed"),  # read as the float -2^63: not exact
        (chat(logprobs="yes"), "logprobs"),
        (chat(logprobs=True, top_logprobs=21), "top_logprobs"),
        (chat(top_logprobs=2), "top_logprobs"),
        (chat(stream="true"), "stream"),
        (chat(stream_options={"include_usage": True}), "stream_options"),
        (chat(stream=True, stream_options={"include_usage": 1}), "stream_options.include_usage"),
        (chat(parallel_tool_calls="no"), "parallel_tool_calls"),
        (chat(reasoning_effort="max"), "reasoning_effort"),
        (chat(chat_template_kwargs=[1]), "chat_template_kwargs"),
        (chat(chat_template_kwargs=nested(MAX_DEPTH + 1)), "chat_template_kwargs"),
        (chat(continue_final_message=True), "continue_final_message"),
        (chat(continue_final_message=True, add_generation_prompt=False), "continue_final_message"),
        (chat(chat_template_kwargs={"add_generation_prompt": "no"}), "chat_template_kwargs.add_generation_prompt"),
        (chat(chat_template_kwargs={"chat_template": "{{ messages }}"}), "chat_template_kwargs.chat_template"),
        (chat(chat_template_kwargs={"tokenize": True}), "chat_template_kwargs.tokenize"),
        (
            chat(add_generation_prompt=False, chat_template_kwargs={"continue_final_message": True}),
            "chat_template_kwargs.continue_final_message",  # the last message is the user's
        ),
        (
            chat(
                messages=[USER, {"role": "assistant", "content": "Sure"}],
                continue_final_message=True,
                add_generation_prompt=False,
                chat_template_kwargs={"add_generation_prompt": True},
            ),
            "chat_template_kwargs.add_generation_prompt",
        ),
        (  # vLLM's request check reads the two fields alone
            chat(
                continue_final_message=True,
                add_generation_prompt=True,
                chat_template_kwargs={"add_generation_prompt": False},
            ),
            "continue_final_message",
        ),
        (chat(logit_bias={"1": 5}), "logit_bias"),
        (chat(functions=[{"name": "f"}]), "functions"),
        (chat(audio={"voice": "x"}), "audio"),
        (chat(ignore_eos="y"), "ignore_eos"),
        (chat(skip_special_tokens=0), "skip_special_tokens"),
        ([1, 2], None),
        (chat(messages=[USER, ANSWER]), "messages[1].role"),
        (chat(messages=[USER, CALLING, {**ANSWER, "tool_call_id": "c9"}]), "messages[2].tool_call_id"),
        (chat(messages=[USER, CALLING, USER]), "messages[1].tool_calls"),
        (chat(messages=[USER, CALLING, USER, ANSWER]), "messages[1].tool_calls"),
        (
            chat(messages=[USER, {**CALLING, "tool_calls": [*CALLING["tool_calls"], CALL_2]}, ANSWER]),
            "messages[1].tool_calls",
        ),
        (chat(messages=[USER, CALLING, ANSWER, USER, ANSWER]), "messages[4].role"),
        (chat(messages=[USER, CALLING, ANSWER, ANSWER]), "messages[3].tool_call_id"),  # one call answered twice
        (chat(modalities=["text", "audio"]), "modalities"),
        (chat(modalities=["video"]), "modalities[0]"),
        (chat(modalities="text"), "modalities"),
        (chat(metadata={f"k{i}": "v" for i in range(17)}), "metadata"),
        (chat(metadata={"k" * 65: "v"}), "metadata"),
        (chat(metadata={"k": "v" * 513}), "metadata"),
        (chat(metadata={"k": 1}), "metadata"),
        (chat(min_tokens=-1), "min_tokens"),
        (chat(min_tokens=8, max_completion_tokens=7), "min_tokens"),
        (chat(include_stop_str_in_output="yes"), "include_stop_str_in_output"),
        (chat(chat_template="{{ messages }}"), "chat_template"),
        (chat(guided_json={"type": "object"}), "guided_json"),
        (chat(structured_outputs={"regex": "a+"}), "structured_outputs"),
        (chat(repetition_penalty=1.2), "repetition_penalty"),
        (chat(use_beam_search=True), "use_beam_search"),
        (chat(user=5), "user"),
        (chat(store="yes"), "store"),
        (chat(service_tier="fastest"), "service_tier"),
        (chat(verbosity=1), "verbosity"),
        (chat(prompt_cache_key=["k"]), "prompt_cache_key"),
    ],
)
def test_chat_errors_name_their_param(body, param):
    with pytest.raises(APIError) as e:
        parse_chat_completion(body)
    assert (e.value.status, e.value.param, e.value.type) == (400, param, "invalid_request_error")


def test_a_call_answered_twice_is_refused_in_openais_words():
    """OpenAI: "Invalid parameter: Duplicate value for 'tool_call_id' of 'call_…' in messages[7] and messages[8]."
    (agno#5116, search2ai#30); Anthropic refuses the same in its words (validation/messages.py)."""
    with pytest.raises(APIError) as error:
        parse_chat_completion(chat(messages=[USER, CALLING, ANSWER, {**ANSWER, "content": "rain"}]))
    assert error.value.message == (
        "Invalid parameter: Duplicate value for 'tool_call_id' of 'c1' in messages[2] and messages[3]."
    )


def test_chat_template_kwargs_set_the_render_switches_over_the_fields_as_vllm_merges_them():
    """vLLM merges chat_template_kwargs over the request's fields and hands both to `apply_chat_template` as its
    arguments: the kwargs' add_generation_prompt / continue_final_message win, and are no template variables."""
    prefill = [USER, {"role": "assistant", "content": "Sure"}]
    cases = [
        (chat(chat_template_kwargs={"add_generation_prompt": False, "x": 1}), (False, False)),
        (chat(add_generation_prompt=False, chat_template_kwargs={"add_generation_prompt": True}), (True, False)),
        (
            chat(messages=prefill, continue_final_message=True, chat_template_kwargs={"add_generation_prompt": False}),
            (False, True),
        ),
        (
            chat(
                messages=prefill, chat_template_kwargs={"continue_final_message": True, "add_generation_prompt": False}
            ),
            (False, True),
        ),
    ]
    for body, switches in cases:
        parsed = parse_chat_completion(body).chat
        assert (parsed.add_generation_prompt, parsed.continue_final_message) == switches, body
        assert parsed.template_kwargs == ({"x": 1} if "x" in body["chat_template_kwargs"] else {}), body


def test_a_whole_number_past_64_bits_is_refused_by_its_bounds():
    """orjson reads 2^70 as a float: the refusal says the range, not that 2^70 is no integer."""
    with pytest.raises(APIError) as e:
        parse_chat_completion(orjson.loads(orjson.dumps(chat()).replace(b"{", b'{"seed":1180591620717411303424,', 1)))
    assert e.value.param == "seed" and "between -9223372036854775808 and 9223372036854775807" in e.value.message


def test_tool_turns_modalities_metadata_and_continuous_usage_that_hold():
    """Tool messages answering the calls before them (a last assistant turn may leave its calls open), text output,
    metadata within OpenAI's bounds, and vLLM's continuous_usage_stats (only with include_usage)."""
    parallel = {**CALLING, "tool_calls": [*CALLING["tool_calls"], CALL_2]}
    for messages in (
        [USER, CALLING, ANSWER, USER],
        [USER, parallel, {**ANSWER, "tool_call_id": "c2"}, ANSWER],
        [USER, CALLING],
    ):
        assert parse_chat_completion(chat(messages=messages)).chat.messages[1]["tool_calls"]
    req = parse_chat_completion(
        chat(
            modalities=["text"],
            metadata={"k" * 64: "v" * 512},
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        )
    )
    assert req.settings.include_usage and req.settings.continuous_usage
    options = {"include_usage": False, "continuous_usage_stats": True}
    assert not parse_chat_completion(chat(stream=True, stream_options=options)).settings.continuous_usage


def test_plain_messages_read_at_once_read_as_declared():
    """A message read without its field-by-field reads (a role and a string content, nothing else) is what the
    declared read makes of it; every other shape, and every message the declared read refuses, takes that read."""
    roles = ["system", "developer", "user", "assistant", "tool", "bogus", "", 5, None, ["user"]]
    contents = ["x", "", None, [], [{"type": "text", "text": "a"}], 5, {"text": "a"}]
    extras = [{}, {"name": "n"}, {"name": None}, {"tool_call_id": "c1"}]
    plain = 0
    for role in roles:
        for content in contents:
            for extra in extras:
                for m in ({"role": role, "content": content, **extra}, {"content": content, **extra}, {"role": role}):
                    try:
                        declared = _message(Fields(m, MESSAGE, "messages[0]"))
                    except APIError:
                        declared = None
                    fast = _plain_message(m)
                    assert fast is None or fast == declared, m
                    plain += fast is not None
    assert plain == 8  # four roles, two string contents


def test_integral_floats_are_integers():
    """1.0 is an integer to JSON Schema and to OpenAI's and vLLM's pydantic servers: taken, as an int."""
    settings = parse_chat_completion(chat(n=2.0, max_tokens=16.0, seed=-3.0, top_k=40.0)).settings
    assert (settings.n, settings.max_tokens, settings.seed, settings.top_k) == (2, 16, -3, 40)
    assert all(type(v) is int for v in (settings.n, settings.max_tokens, settings.seed, settings.top_k))
    assert parse_chat_completion(chat(max_completion_tokens=1e3)).settings.max_tokens == 1000
    prompts = parse_completion({"model": "m", "prompt": [[1.0, 2], [3.0]], "best_of": 1.0, "logprobs": 2.0})
    assert prompts.prompts == [[1, 2], [3]] and all(type(i) is int for p in prompts.prompts for i in p)
    assert parse_completion({"model": "m", "prompt": [5.0]}).prompts == [[5]]


def test_completion_prompt_forms():
    assert parse_completion({"model": "m", "prompt": "hi"}).prompts == ["hi"]
    assert parse_completion({"model": "m", "prompt": ["a", "b"]}).prompts == ["a", "b"]
    assert parse_completion({"model": "m", "prompt": [1, 2]}).prompts == [[1, 2]]
    assert parse_completion({"model": "m", "prompt": [[1], [2, 3]]}).prompts == [[1], [2, 3]]
    req = parse_completion({"model": "m", "prompt": "x", "logprobs": 3, "max_tokens": 4, "echo": False, "best_of": 1})
    assert (req.settings.logprobs, req.settings.top_logprobs, req.settings.max_tokens) == (True, 3, 4)


@pytest.mark.parametrize(
    "fields, param",
    [
        ({}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [[]]}, "prompt[0]"),
        ({"prompt": ["a", 3]}, "prompt[1]"),
        ({"prompt": [1, "a"]}, "prompt[0]"),
        ({"prompt": [1, 2.5]}, "prompt[0]"),
        ({"prompt": [[1], [True]]}, "prompt[1]"),
        ({"prompt": {"text": "a"}}, "prompt"),
        ({"prompt": ["a"] * 17}, "prompt"),
        ({"prompt": ["a"] * 8, "n": MAX_CHOICES // 8 + 1}, "n"),
        ({"prompt": "a", "echo": True, "logprobs": 0}, "echo"),
        ({"prompt": "a", "echo": 1}, "echo"),
        ({"prompt": "a", "suffix": "b"}, "suffix"),
        ({"prompt": "a", "best_of": 2}, "best_of"),
        ({"prompt": "a", "logprobs": 6}, "logprobs"),
        ({"prompt": "a", "logprobs": True}, "logprobs"),
        ({"prompt": "a", "guided_regex": "a+"}, "guided_regex"),
        ({"prompt": "a", "prompt_logprobs": 1}, "prompt_logprobs"),
        ({"prompt": "a", "bad_words": ["x"]}, "bad_words"),
        ({"prompt": "a", "user": 1}, "user"),
    ],
)
def test_completion_errors_name_their_param(fields, param):
    with pytest.raises(APIError) as e:
        parse_completion({"model": "m", **fields})
    assert (e.value.status, e.value.param) == (400, param)


READS = Obj(
    "Reads",
    {
        "name": string("", required=True),
        "label": string("", default="x"),
        "flag": boolean(True),
        "count": integer(0, 9, 3),
        "ratio": number(0.0, 1.0, 0.5),
        "inner": obj(Obj("Inner", {})),
        "list": array({"type": "string"}, 2),
        "gone": refused("not here"),
    },
)


@pytest.mark.parametrize("value", [{"name": "n"}, {"name": "n", "label": None, "flag": None, "count": None}])
def test_absent_or_null_optional_fields_read_as_their_defaults(value):
    fields = Fields(value, READS)
    assert (fields.string("label"), fields.boolean("flag"), fields.integer("count"), fields.number("ratio")) == (
        "x",
        True,
        3,
        0.5,
    )
    assert (fields.obj("inner"), fields.array("list"), fields.get("list"), fields.refuse("gone")) == (None,) * 4
    with pytest.raises(APIError) as e:  # asked for as required: still enforced when absent
        fields.string("label", required=True)
    assert e.value.param == "label"
    with pytest.raises(KeyError):  # reading an undeclared key is a programming error, given or not
        fields.boolean("undeclared")


def test_required_fields_stay_required():
    with pytest.raises(APIError) as e:
        Fields({"label": "y"}, READS).string("name")
    assert (e.value.param, e.value.code) == ("name", "missing_required_parameter")
    assert Fields({"name": "n", "label": "y", "count": 4.0}, READS).integer("count") == 4


def test_given_names_the_optional_keys_with_a_value_in_their_order():
    fields = Fields({"name": "n", "list": ["a"], "label": None, "count": 0, "flag": False}, READS)
    assert fields.given(("flag", "label", "count", "gone", "list")) == ["flag", "count", "list"]


def test_read_takes_the_defaults_of_the_keys_left_out_and_reads_the_given_ones_in_order():
    reads = Reads(
        READS, {"flag": Fields.boolean, "label": Fields.string, "count": Fields.integer, "gone": Fields.refuse}
    )
    assert Fields({"name": "n", "label": None}, READS).read(reads) == {
        "flag": True,
        "label": "x",
        "count": 3,
        "gone": None,
    }
    given = Fields({"name": "n", "count": 4.0, "flag": False}, READS).read(reads)
    assert given == {"flag": False, "label": "x", "count": 4, "gone": None}
    assert reads.defaults["flag"] is True  # the defaults themselves unchanged
    with pytest.raises(APIError) as e:
        Fields({"name": "n", "count": "x", "label": 5, "gone": 1}, READS).read(reads)
    assert e.value.param == "label"  # the first of `reads`' keys, not of the body's
    with pytest.raises(KeyError):  # a required or undeclared key is no optional read
        Reads(READS, {"name": Fields.string})


def test_reads_remember_a_bounded_number_of_body_key_orders_each_giving_the_read_order():
    reads = Reads(READS, {"flag": Fields.boolean, "label": Fields.string, "count": Fields.integer})
    flag, label, count = reads.readers.items()
    assert reads.present_in(("count", "name", "flag")) == [flag, count]
    assert reads.present_in(("flag", "count")) == [flag, count]
    assert reads.present_in(("count", "name", "flag")) == [flag, count]  # remembered, the same
    assert reads.present_in(tuple(f"x{i}" for i in range(65)) + ("label",)) == [label]
    assert len(reads._present) == 2  # a body of more than 64 keys is not remembered
    for i in range(Reads.SHAPES + 10):
        assert reads.present_in((f"y{i}", "label")) == [label]
    assert len(reads._present) <= Reads.SHAPES


def test_the_keys_read_only_when_given_are_declared_and_optional():
    """The validators read these keys only when the body gives them (`Fields.given`, `Fields.read`): each is declared,
    so a read of one is still checked against the declaration, and optional, so an absent one is no missing required
    field; the default each takes when left out is what its read gives it absent."""
    from gateway.validation.chat import _RENDER_FIELDS, _SETTINGS_READS, _TAIL_READS, _TOOL_FIELDS, CHAT
    from gateway.validation.completions import _SETTINGS_READS as COMPLETION_READS
    from gateway.validation.completions import COMPLETION
    from gateway.validation.fields import _REFUSED_SETTINGS
    from gateway.validation.messages import _AFTER_MAX_TOKENS, MESSAGES
    from gateway.validation.messages import _SAMPLING as MESSAGES_SAMPLING
    from gateway.validation.responses import _CLOSING, _OPENING, _SAMPLING, RESPONSES

    for key in (*_TOOL_FIELDS, *_RENDER_FIELDS, *_REFUSED_SETTINGS):
        assert not CHAT.fields[key].required, key
    for key in _REFUSED_SETTINGS:
        assert CHAT.fields[key].refused, key
    runs = [(CHAT, _SETTINGS_READS.head), (CHAT, _TAIL_READS), (COMPLETION, COMPLETION_READS.head)]
    runs += [(RESPONSES, _OPENING), (RESPONSES, _SAMPLING), (RESPONSES, _CLOSING)]
    for decl, reads in [*runs, (MESSAGES, MESSAGES_SAMPLING), (MESSAGES, _AFTER_MAX_TOKENS)]:
        for key, read in reads.readers.items():
            if read is Fields.refuse:
                assert decl.fields[key].refused, key
            elif key not in ("stream_options", "modalities", "metadata", "stop_sequences"):  # (values unused, or
                # stop_sequences: None taken as [] by its door)
                assert read(Fields({}, decl), key) == reads.defaults[key], key
    assert Fields({}, CHAT).read(_SETTINGS_READS.head)["stream_options"] == (False, False)


@pytest.mark.parametrize("decl", ["chat", "completion"])
def test_settings_read_only_when_given_default_to_what_their_read_gives(decl):
    """`parse_settings` reads these only when the body gives them: the GenerationSettings default each keeps is what
    reading it absent (or null) gives, for both bodies that declare it."""
    from gateway.validation.chat import _SETTINGS_READS as CHAT_READS
    from gateway.validation.chat import CHAT
    from gateway.validation.completions import _SETTINGS_READS as COMPLETION_READS
    from gateway.validation.completions import COMPLETION
    from gateway.validation.fields import GenerationSettings

    defaults = GenerationSettings()
    plain = (CHAT_READS if decl == "chat" else COMPLETION_READS).plain.readers
    for body in ({}, dict.fromkeys(plain)):
        fields = Fields(body, CHAT if decl == "chat" else COMPLETION)
        for key, read in plain.items():
            assert read(fields, key) == getattr(defaults, key), key
            assert type(read(fields, key)) is type(getattr(defaults, key)), key


@pytest.mark.parametrize(
    ("options", "stream", "usage"),
    [
        ({}, True, (False, False)),
        ({"include_usage": None, "continuous_usage_stats": "x"}, True, (False, False)),  # (read only with usage)
        ({"include_usage": False, "continuous_usage_stats": 5}, True, (False, False)),
        ({"include_usage": True}, True, (True, False)),
        ({"include_usage": True, "continuous_usage_stats": None}, True, (True, False)),
        ({"include_usage": True, "continuous_usage_stats": False}, True, (True, False)),
        ({"include_usage": True, "continuous_usage_stats": True}, True, (True, True)),
        ({"include_usage": 0}, True, "stream_options.include_usage"),  # (0 == False, but no boolean)
        ({"include_usage": 1}, True, "stream_options.include_usage"),
        ({"include_usage": True, "continuous_usage_stats": 1}, True, "stream_options.continuous_usage_stats"),
        ({"include_usage": True, "continuous_usage_stats": 0}, True, "stream_options.continuous_usage_stats"),
        ({"include_usage": True}, False, "stream_options"),
        ({"include_usage": True}, None, "stream_options"),
        ([], True, "stream_options"),
    ],
)
def test_stream_options_values_and_refusals(options, stream, usage):
    body = chat(stream=stream, stream_options=options)
    if isinstance(usage, str):
        with pytest.raises(APIError) as e:
            parse_chat_completion(body)
        assert (e.value.status, e.value.param) == (400, usage)
    else:
        settings = parse_chat_completion(body).settings
        assert (settings.include_usage, settings.continuous_usage) == usage


@pytest.mark.parametrize(
    ("value", "read"),
    [
        (0.5, 0.5),
        (1, 1.0),
        (0.0, 0.0),
        (2.0, 2.0),
        (2.5, "temperature"),
        (-0.5, "temperature"),
        (True, "temperature"),
        ("0.5", "temperature"),
    ],
)
def test_numbers_read_as_floats_within_bounds(value, read):
    if isinstance(read, str):
        with pytest.raises(APIError) as e:
            parse_chat_completion(chat(temperature=value))
        assert (e.value.status, e.value.param) == (400, read)
    else:
        temperature = parse_chat_completion(chat(temperature=value)).settings.temperature
        assert (temperature, type(temperature)) == (read, float)


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ({"type": "text"}, None),
        ({"type": "text", "json_schema": 5}, None),  # (a case's undeclared keys ignored)
        ({"type": "json_object"}, {"type": "json_object"}),
        ({"type": "json_schema", "json_schema": {"name": "n", "schema": {}}}, "json_schema"),
        ({"type": 5}, "response_format.type"),
        ({"type": "xml"}, "response_format.type"),
        ({}, "response_format.type"),
        (["json_object"], "response_format"),
    ],
)
def test_response_formats_and_refusals(value, read):
    body = chat(response_format=value)
    if read == "json_schema":
        assert parse_chat_completion(body).chat.response_format["type"] == "json_schema"
    elif isinstance(read, str):
        with pytest.raises(APIError) as e:
            parse_chat_completion(body)
        assert (e.value.status, e.value.param) == (400, read)
    else:
        assert parse_chat_completion(body).chat.response_format == read


@pytest.mark.parametrize(
    "item",
    [
        {"role": "user", "content": "hi"},
        {"content": "hi", "role": "assistant"},
        {"type": "message", "role": "developer", "content": "hi"},
        {"role": "system", "content": ""},
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "output_text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": []}]},
        {"role": "assistant", "content": [{"type": "input_text", "text": "a"}, {"type": "refusal", "refusal": "no"}]},
        {"type": "message", "role": "user", "content": []},
    ],
)
def test_a_plain_responses_message_item_reads_as_any_other_message(item):
    """A message item of a role and a string content is taken without its field-by-field reads: the same canonical
    item as that message read field by field (an ignored key makes it no plain item)."""
    from gateway.validation.responses import parse_responses_request

    def canonical(item):
        (out,) = parse_responses_request({"model": "m", "input": [item]}).items
        assert out.pop("id").startswith("msg")
        return out

    assert canonical(item) == canonical({**item, "ignored": 1})


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"role": "tool", "content": "hi"}, "input[0].role"),
        ({"role": 5, "content": "hi"}, "input[0].role"),
        ({"role": "user", "content": 5}, "input[0].content"),
        ({"type": "reasoning", "role": "user", "content": "hi"}, "input[0].summary"),
        ({"role": "user", "content": [{"type": "input_text", "text": 5}]}, "input[0].content[0].text"),
        ({"role": "user", "content": [{"type": "input_text"}]}, "input[0].content[0].text"),
        ({"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}, "input[0].content[0]"),
        ({"role": "user", "content": [{"type": "text", "text": "a"}]}, "input[0].content[0].type"),
        ({"role": "user", "content": ["a"]}, "input[0].content[0]"),
        ({"role": "user", "content": [{"type": "input_text", "text": "a"}] * 1001}, "input[0].content"),
    ],
)
def test_message_items_like_plain_ones_are_refused_as_before(item, param):
    from gateway.validation.responses import parse_responses_request

    with pytest.raises(APIError) as e:
        parse_responses_request({"model": "m", "input": [{"role": "user", "content": "ok"}, item]})
    assert (e.value.status, e.value.param) == (400, param.replace("[0]", "[1]", 1))
