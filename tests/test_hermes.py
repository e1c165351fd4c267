"""The hermes family: prompt rendering, stop ids, grammars (compiled by xgrammar) and the output parser."""

from __future__ import annotations

import json
import random
import re
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import xgrammar as xgr
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.checkpoint import Checkpoint, load_checkpoint
from backends.worker.grammar import tokenizer_info
from gateway.families import families, get_family
from gateway.families.base import FamilyContext
from gateway.families.chatml import prompt_opens_reasoning
from gateway.families.hermes import HermesFamily, HermesParser
from gateway.types import ChatRequest, Delta, Piece

SMOLLM_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
TOOLS_INTRO = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
TOOLS_OUTRO = (
    "</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call><|im_end|>\n"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


@cache
def smollm2() -> Checkpoint:
    return load_checkpoint()


def family(**options: Any) -> HermesFamily:
    c = smollm2()
    ctx = FamilyContext(c.tokenizer, c.chat_template, c.bos_token, c.eos_token, c.eos_token_ids, c.control_token_ids)
    ctx.options.update(options)
    return HermesFamily(ctx)


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# --------------------------------------------------------------------------- registry


def test_registry_knows_hermes_and_names_known_families_on_error() -> None:
    assert get_family("hermes") is HermesFamily is families()["hermes"]
    with pytest.raises(ValueError, match="unknown model family 'nope'; known: .*hermes"):
        get_family("nope")


# --------------------------------------------------------------------------- rendering


def test_plain_chat_keeps_smollm2_default_system_prompt() -> None:
    prompt = family().render(ChatRequest(messages=[{"role": "user", "content": "Hi"}]))
    assert prompt == SMOLLM_SYSTEM + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_system_message_replaces_the_default() -> None:
    request = ChatRequest(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert family().render(request) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_tools_go_into_the_system_turn() -> None:
    request = ChatRequest(messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER, TIME])
    assert family().render(request) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face\n\n"
        + TOOLS_INTRO
        + json.dumps(WEATHER)
        + "\n"
        + json.dumps(TIME)
        + "\n"
        + TOOLS_OUTRO
        + "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_tool_choice_none_hides_tools() -> None:
    request = ChatRequest(messages=[{"role": "user", "content": "Hi"}], tools=[WEATHER], tool_choice="none")
    assert "<tools>" not in family().render(request)


def test_assistant_tool_calls_and_tool_results_history() -> None:
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [call("a", "get_weather", {"city": "Paris"}), call("b", "get_weather", {"city": "Oslo"})],
        },
        {"role": "tool", "tool_call_id": "a", "content": "20C"},
        {"role": "tool", "tool_call_id": "b", "content": "5C"},
    ]
    prompt = family().render(ChatRequest(messages=messages, tools=[WEATHER]))
    assert prompt.endswith(
        "<|im_start|>user\nWeather in Paris and Oslo?<|im_end|>\n"
        "<|im_start|>assistant\nChecking.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n20C\n</tool_response>\n<tool_response>\n5C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert prompt.startswith("<|im_start|>system\nS\n\n# Tools\n")


def test_reasoning_history_is_kept_only_after_the_last_user_query() -> None:
    messages = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1", "reasoning_content": "old thoughts"},
        {"role": "user", "content": "Q2"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "\nplan\n",
            "tool_calls": [call("c", "get_time", {})],
        },
        {"role": "tool", "tool_call_id": "c", "content": "noon"},
        {"role": "assistant", "content": "<think>\ninline\n</think>\n\nIt is noon."},
    ]
    prompt = family().render(ChatRequest(messages=messages, tools=[TIME], add_generation_prompt=False))
    assert prompt.endswith(
        "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
        "<|im_start|>user\nQ2<|im_end|>\n"
        '<|im_start|>assistant\n<think>\nplan\n</think>\n\n<tool_call>\n{"name": "get_time", "arguments": {}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nnoon\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\ninline\n</think>\n\nIt is noon.<|im_end|>\n"
    )


def test_enable_thinking_false_closes_an_empty_think_block() -> None:
    request = ChatRequest(messages=[{"role": "user", "content": "Hi"}], template_kwargs={"enable_thinking": False})
    assert family().render(request).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_qwen3s_own_template_renders_a_tool_history_whose_calls_have_null_content() -> None:
    """OpenAI clients send an assistant's calls with `content: null`: Qwen3's own template (used when the checkpoint
    ships it: it reads `tools`) tests `'</think>' in content` and raised a TypeError on None (a 400). The content is
    given as "" there, as vLLM gives it."""
    own = (Path(__file__).parent / "data" / "chat_templates" / "Qwen-Qwen3-0.6B.jinja").read_text(encoding="utf-8")
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call("a", "get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "a", "content": "20C"},
    ]
    prompt = family(chat_template=own).render(ChatRequest(messages=messages, tools=[WEATHER]))
    assert prompt.endswith(
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n20C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_chat_template_option_overrides_and_a_tool_aware_template_is_used() -> None:
    own = "{% for m in messages %}{{ m.content }}{% endfor %}{{ tools | length }}"
    request = ChatRequest(messages=[{"role": "user", "content": "Hi"}], tools=[WEATHER])
    assert family(chat_template=own).render(request) == "Hi1"
    c = smollm2()
    ctx = FamilyContext(c.tokenizer, own, c.bos_token, c.eos_token, c.eos_token_ids, c.control_token_ids)
    assert HermesFamily(ctx).render(request) == "Hi1"


def test_stop_ids_are_im_end_then_eos_without_repeats() -> None:
    c = smollm2()
    assert c.tokenizer.token_to_id("<|im_end|>") == 2 and c.eos_token_ids == [2]
    assert family().stop_token_ids() == [2]  # SmolLM2's eos is <|im_end|> itself: named once
    ctx = FamilyContext(c.tokenizer, c.chat_template, c.bos_token, "<|endoftext|>", [0], c.control_token_ids)
    assert HermesFamily(ctx).stop_token_ids() == [2, 0]


@pytest.mark.parametrize(
    ("prompt", "opens"),
    [
        ("<|im_start|>assistant\n", False),
        ("<|im_start|>assistant\n<think>\n", True),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),
        ("<|im_start|>user\nwhat is <think>?<|im_end|>\n<|im_start|>assistant\n", False),
    ],
)
def test_prompt_opens_reasoning(prompt: str, opens: bool) -> None:
    assert prompt_opens_reasoning(prompt) is opens


# --------------------------------------------------------------------------- parser


def merge(deltas: list[Delta]) -> dict[str, Any]:
    """The final message an OpenAI client assembles from the deltas (ids left out: they are random)."""
    content = "".join(d.content for d in deltas)
    reasoning = "".join(d.reasoning for d in deltas)
    calls: dict[int, dict[str, str]] = {}
    for d in deltas:
        if d.tool_index is not None:
            slot = calls.setdefault(d.tool_index, {"name": "", "arguments": ""})
            slot["name"] += d.tool_name or ""
            slot["arguments"] += d.tool_arguments
    assert sorted(calls) == list(range(len(calls))), "tool indices are dense from 0"
    return {"content": content, "reasoning": reasoning, "tool_calls": [calls[i] for i in sorted(calls)]}


def run(text: str, splits: list[int] | None = None, **options: Any) -> tuple[list[Delta], HermesParser]:
    parser = HermesParser(**options)
    cuts = sorted(set(splits or []))
    bounds = [0, *[c for c in cuts if 0 < c < len(text)], len(text)]
    deltas: list[Delta] = []
    for start, end in pairwise(bounds):
        deltas += parser.feed([Piece(text[start:end])])
    return deltas + parser.finish(), parser


def parse(text: str, **options: Any) -> dict[str, Any]:
    return merge(run(text, **options)[0])


def test_plain_text_is_content() -> None:
    assert parse("Hello there!\n") == {"content": "Hello there!\n", "reasoning": "", "tool_calls": []}


def test_think_block_is_reasoning() -> None:
    result = parse("<think>\nThe user greets.\n</think>\n\nHello!")
    assert (result["reasoning"], result["content"]) == ("The user greets.", "Hello!")


def test_prompt_opened_reasoning_runs_until_think_end() -> None:
    result = parse("Simple.\n</think>\n\n2 + 2 = 4.", in_reasoning=True)
    assert (result["reasoning"], result["content"]) == ("Simple.", "2 + 2 = 4.")


def test_only_one_think_the_model_writes_again_is_dropped_however_chunked() -> None:
    """The prompt opened the think block and the model writes `<think>` twice: the first is the block it already
    is in, the second is reasoning text, whole or cut between the two (the cut dropped both)."""
    text = "<think><think> x\n</think>\n\nA"
    for splits in ([], [7], list(range(1, len(text)))):
        result = parse(text, in_reasoning=True, splits=splits)
        assert (result["reasoning"], result["content"]) == ("<think> x", "A"), splits


def test_think_tokens_written_again_read_the_same_one_token_at_a_time() -> None:
    """As the text case above, with `<think>` as its added token (Qwen3): one dropped after the block opened."""
    markers = frozenset({"<tool_call>", "</tool_call>", "<think>", "</think>"})
    pieces = [Piece("<think>", 151667), Piece("<think>", 151667), Piece(" "), Piece("<think>", 151667), Piece("=>")]
    for in_reasoning, want in ((False, "<think>=>"), (True, "<think> <think>=>")):
        for chunks in ([pieces], [[p] for p in pieces]):
            parser = HermesParser(in_reasoning=in_reasoning, token_markers=markers)
            deltas = [d for chunk in chunks for d in parser.feed(chunk)] + parser.finish()
            assert merge(deltas)["reasoning"] == want


def test_unclosed_reasoning_stays_reasoning_at_the_end() -> None:
    assert parse("<think>\nStill thinking", in_reasoning=False)["reasoning"] == "Still thinking"
    assert parse("Still thinking", in_reasoning=True) == {
        "content": "",
        "reasoning": "Still thinking",
        "tool_calls": [],
    }


def test_tool_call_streams_id_and_name_once_then_argument_fragments() -> None:
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    deltas, parser = run(text, splits=list(range(len(text))))
    calls = [d for d in deltas if d.tool_index is not None]
    assert [d.tool_name for d in calls if d.tool_name] == ["get_weather"]
    assert calls[0].tool_name == "get_weather" and re.fullmatch(r"call_[0-9a-f]{24}", calls[0].tool_id or "")
    assert all(d.tool_id is None for d in calls[1:])
    fragments = [d.tool_arguments for d in calls[1:]]
    assert len(fragments) > 5 and "".join(fragments) == '{"city": "Paris"}'
    assert merge(deltas)["content"] == "Let me check."
    assert parser.saw_tool_call


@pytest.mark.parametrize(
    "cut",
    [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',
        '<tool_call>\n{"name": "get_weather", "arguments": {',
    ],
)
def test_a_call_cut_before_its_first_argument_is_complete_is_no_call(cut: str) -> None:
    for splits in ([], list(range(len(cut)))):
        deltas, parser = run("Checking.\n" + cut, splits=splits)
        assert merge(deltas) == {"content": "Checking.", "reasoning": "", "tool_calls": []}, splits
        assert not parser.saw_tool_call


@pytest.mark.parametrize(
    ("body", "arguments"),
    [
        ('{"name": "f", "arguments": {"trigger": true}', '{"trigger": true}'),
        ('{"name": "f", "arguments": {}', "{}"),
        ('{"name": "f", "arguments": {"a": {"b": 1}}\n', '{"a": {"b": 1}}'),
    ],
)
def test_a_call_cut_after_its_arguments_close_is_a_call(body: str, arguments: str) -> None:
    """Its arguments are complete, as a Qwen3 XML call cut after `</function>` or a token-section body cut before
    its end token: only the body's `}` or `</tool_call>` is missing (max_tokens)."""
    text = "Checking.\n<tool_call>\n" + body
    for splits in ([], list(range(len(text)))):
        deltas, parser = run(text, splits=splits)
        want = {"content": "Checking.", "reasoning": "", "tool_calls": [{"name": "f", "arguments": arguments}]}
        assert merge(deltas) == want, splits
        assert parser.saw_tool_call


def test_the_call_is_sent_once_its_first_argument_is_complete_then_streams() -> None:
    parser = HermesParser()
    head = parser.feed([Piece('<tool_call>\n{"name": "f", "arguments": {"a": "x')])
    assert head == []
    released = parser.feed([Piece('y", "b": "lo')])
    assert released[0].tool_name == "f" and "".join(d.tool_arguments or "" for d in released) == '{"a": "xy", "b": "lo'
    assert [d.tool_arguments for d in parser.feed([Piece("ng")])] == ["ng"]


@pytest.mark.parametrize(
    ("body", "arguments"),
    [
        ('{"p": True}', {"p": "True"}),
        ('{"p": None, "q": [undefined, 1]}', {"p": "None", "q": ["undefined", 1]}),
        ("{p: 1}", {"p": 1}),
        ('{"a": 1, "p": False, "r": nan}', {"a": 1, "p": "False", "r": "nan"}),
        ('{"a": [true, false, null, -0.5e3]}', {"a": [True, False, None, -500.0]}),
    ],
)
def test_a_bare_word_json_lacks_goes_as_its_text_however_chunked(body: str, arguments: dict[str, Any]) -> None:
    """Python's `True`, an unquoted key: before the call is released at its first argument or after, the word goes
    as a JSON string, so the arguments a client gets are JSON, the same read whole or a character at a time; a word
    JSON has goes verbatim."""
    text = '<tool_call>{"name": "f", "arguments": ' + body + "}</tool_call>"
    for splits in ([], list(range(len(text)))):
        calls = merge(run(text, splits=splits)[0])["tool_calls"]
        assert [c["name"] for c in calls] == ["f"] and json.loads(calls[0]["arguments"]) == arguments, splits


@pytest.mark.parametrize(
    ("body", "calls"),
    [
        ('{"p": tru', []),  # cut before the call is released: no call
        ('{"a": 1, "p": tru', [{"name": "f", "arguments": '{"a": 1, "p": "tru"'}]),  # sent: stays, the word its text
    ],
)
def test_a_bare_word_cut_by_the_end_of_the_output(body: str, calls: list[dict[str, str]]) -> None:
    text = '<tool_call>{"name": "f", "arguments": ' + body
    for splits in ([], list(range(len(text)))):
        assert merge(run(text, splits=splits)[0])["tool_calls"] == calls, splits


def test_parallel_calls_get_dense_indices_and_whitespace_between_is_dropped() -> None:
    text = (
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n\n'
        '<tool_call>{"name":"get_weather","arguments":{"city":"Oslo"}}</tool_call>\n'
    )
    assert parse(text) == {
        "content": "",
        "reasoning": "",
        "tool_calls": [
            {"name": "get_time", "arguments": "{}"},
            {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
        ],
    }


def test_markers_inside_argument_strings_are_arguments() -> None:
    args = '{"text": "Use <tool_call> and </tool_call>, \\"}\\" too"}'
    result = parse(f'<tool_call>\n{{"name": "echo", "arguments": {args}}}\n</tool_call>')
    assert result["tool_calls"] == [{"name": "echo", "arguments": args}]
    assert result["content"] == ""


def test_other_body_layouts_are_parsed_whole() -> None:
    result = parse('<tool_call>{"arguments": {"x": 1}, "name": "f"}</tool_call>')
    assert result["tool_calls"] == [{"name": "f", "arguments": '{"x": 1}'}]


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("<tool_call>not valid json</tool_call> ok", "<tool_call>not valid json</tool_call> ok"),
        ("I will check.\n<tool_call>", "I will check.\n<tool_call>"),
        ('I will check.\n<tool_call>\n{"name": "get_', 'I will check.\n<tool_call>\n{"name": "get_'),
        ("Almost <tool_ca", "Almost <tool_ca"),
    ],
)
def test_bodies_without_a_call_are_returned_as_content(text: str, content: str) -> None:
    deltas, parser = run(text)
    assert merge(deltas) == {"content": content, "reasoning": "", "tool_calls": []}
    assert not parser.saw_tool_call


@pytest.mark.parametrize(
    "cut", ["<", "<tool_", "<tool_call>", "<tool_call>\n", '<tool_call>\n{"name', "<think>\nok\n</think>\n\n<tool_ca"]
)
def test_with_forced_calls_a_cut_marker_or_header_is_never_content(cut: str) -> None:
    for splits in ([], list(range(len(cut)))):
        deltas, parser = run(cut, splits=splits, forced_calls=True)
        assert merge(deltas)["content"] == "" and merge(deltas)["tool_calls"] == [], splits
        assert not parser.saw_tool_call


@pytest.mark.parametrize(
    ("tool_choice", "content"),
    [("auto", "<tool_call>"), ("required", ""), ({"type": "function", "function": {"name": "get_weather"}}, "")],
)
def test_the_family_parser_drops_a_cut_marker_only_when_calls_are_forced(tool_choice: Any, content: str) -> None:
    request = ChatRequest(messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER], tool_choice=tool_choice)
    parser = family().parser(request, "")
    assert merge(parser.feed([Piece("<tool_call>")]) + parser.finish())["content"] == content


def test_partial_marker_is_held_back_until_resolved() -> None:
    parser = HermesParser()
    assert merge(parser.feed([Piece("Hi <tool_")])) == {"content": "Hi", "reasoning": "", "tool_calls": []}
    assert merge(parser.feed([Piece("box>")]))["content"] == " <tool_box>"


def test_without_active_tools_calls_are_content() -> None:
    text = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    deltas, parser = run(text, tool_calls=False)
    assert merge(deltas)["content"] == text and not parser.saw_tool_call


def test_marker_tokens_with_ids_parse_like_text() -> None:
    parser = HermesParser()
    pieces = [
        Piece("<tool_call>", 151657),
        Piece('\n{"name": "f", "arguments": {"a": 1}}\n'),
        Piece("</tool_call>", 151658),
    ]
    assert merge(parser.feed(pieces) + parser.finish())["tool_calls"] == [{"name": "f", "arguments": '{"a": 1}'}]


def test_a_call_token_ends_reasoning_and_the_think_end_after_it_is_dropped() -> None:
    """As vLLM's Qwen3 reasoning parser promotes such a call (tests/reasoning/test_qwen3_tool_call_recovery.py); the
    grammar keeps the token out of reasoning. Spelled in text, `<tool_call>` stays reasoning."""
    markers = frozenset({"<tool_call>", "</tool_call>", "<think>", "</think>"})
    parser = HermesParser(in_reasoning=True, token_markers=markers)
    pieces = [Piece("verify\n"), Piece("<tool_call>", 151657), Piece('\n{"name": "f", "arguments": {"a": 1}}\n'),
              Piece("</tool_call>", 151658), Piece("</think>", 151668), Piece("Done.")]  # fmt: skip
    want = {"content": "Done.", "reasoning": "verify", "tool_calls": [{"name": "f", "arguments": '{"a": 1}'}]}
    assert merge(parser.feed(pieces) + parser.finish()) == want
    parser = HermesParser(in_reasoning=True, token_markers=markers)
    spelled = 'verify <tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assert merge(parser.feed([Piece(spelled)]) + parser.finish())["reasoning"] == spelled


def test_a_call_header_cut_after_the_call_token_is_dropped() -> None:
    """The `<tool_call>` token opened a call: cut before its header completes, it is no call and no content (as the
    token-section families drop a cut call); after the marker spelled as text the text is content."""
    markers = frozenset({"<tool_call>", "</tool_call>"})
    parser = HermesParser(token_markers=markers)
    pieces = [Piece("Checking. "), Piece("<tool_call>", 151657), Piece('{"name": "get_weather", ')]
    assert merge(parser.feed(pieces) + parser.finish())["content"] == "Checking. "
    assert (
        parse('Checking. <tool_call>{"name": "get_weather", ')["content"]
        == 'Checking. <tool_call>{"name": "get_weather", '
    )


def test_family_parser_follows_the_prompt_and_the_tools() -> None:
    request = ChatRequest(messages=[{"role": "user", "content": "Hi"}], tools=[TIME])
    thinking = family(chat_template="{{ '<|im_start|>assistant\\n<think>\\n' }}")
    parser = thinking.parser(request, thinking.render(request))
    assert merge(parser.feed([Piece("hmm</think>ok")]) + parser.finish())["reasoning"] == "hmm"
    plain = family()
    parser = plain.parser(request, plain.render(request))
    assert merge(parser.feed([Piece("hmm</think>ok")]) + parser.finish())["content"] == "hmm</think>ok"


SAMPLES = [
    (
        '<think>\nI should call the tools.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "Zürich 🌸", "unit": "c"}}\n</tool_call>\n<tool_call>\n{"name": "search", "arguments": '
        '{"q": "café \\"best\\" </tool_call>"}}\n</tool_call>'
    ),
    'Sure.<tool_call>{"name": "f", "arguments": {"x": [1, {"y": null}]}}</tool_call> Done <tool_c',
    '<thin>no</think> text <tool_call>bad</tool_call>\n<tool_call>\n{"name": "g", "arguments": {"s": "<',
    'reasoning only</think>answer<tool_call>{"arguments": {}, "name": "late"}</tool_call>',
    '<tool_call>{"name": "a", "arguments": {"x": 1}} , {"name": "b", "arguments": {}}, junk</tool_call> tail',
    "<think> <think><think>=><|file_sep|>>p<\n</tool_call></think>ok",  # a grammar walk's (grammar15)
]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(SAMPLES), st.lists(st.integers(min_value=1, max_value=400), max_size=40), st.booleans())
def test_every_chunking_gives_the_same_answer(text: str, splits: list[int], in_reasoning: bool) -> None:
    whole, _ = run(text, in_reasoning=in_reasoning)
    chunked, _ = run(text, splits=splits, in_reasoning=in_reasoning)
    assert merge(chunked) == merge(whole)


# --------------------------------------------------------------------------- grammar


@cache
def compiler() -> xgr.GrammarCompiler:
    """The vocabulary as the worker gives it to xgrammar."""
    c = smollm2()
    return xgr.GrammarCompiler(tokenizer_info(c, c.config.vocab_size))


def accepts(request: ChatRequest, output: str, fam: HermesFamily | None = None) -> bool:
    """Whether the request's grammar accepts `output` as a complete answer (followed by the stop token)."""
    fam = fam or family()
    grammar = fam.grammar(request, fam.render(request))
    assert grammar is not None
    compiled = {
        "structural_tag": compiler().compile_structural_tag,
        "ebnf": compiler().compile_grammar,
    }[grammar.kind](grammar.text)
    matcher = xgr.GrammarMatcher(compiled)
    return matcher.accept_string(output) and matcher.accept_token(2)


def tools_request(tool_choice: Any = "auto", parallel: bool = True, **kwargs: Any) -> ChatRequest:
    return ChatRequest(
        messages=[{"role": "user", "content": "Weather?"}],
        tools=[WEATHER, TIME],
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        **kwargs,
    )


def tool_call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


PARIS = tool_call("get_weather", '{"city": "Paris"}')
NOON = tool_call("get_time", "{}")


def test_no_tools_and_no_format_means_no_grammar() -> None:
    for request in (ChatRequest(messages=[]), tools_request("none")):
        assert family().grammar(request, family().render(request)) is None


def test_auto_allows_text_and_declared_calls_only() -> None:
    request = tools_request()
    assert accepts(request, "Just text, no call.")
    assert accepts(request, "Let me look.\n" + PARIS + "\n" + NOON)
    assert not accepts(request, tool_call("launch_rockets", "{}"))
    assert not accepts(request, tool_call("get_weather", '{"town": "Paris"}'))
    assert not accepts(request, tool_call("get_weather", '{"city": 3}'))


def test_arguments_follow_the_schema_unless_the_tool_says_strict_false() -> None:
    relaxed = {"type": "function", "function": {**WEATHER["function"], "strict": False}}
    request = ChatRequest(messages=[{"role": "user", "content": "Weather?"}], tools=[relaxed], tool_choice="required")
    assert accepts(request, tool_call("get_weather", '{"town": "Paris"}'))
    assert not accepts(request, tool_call("get_weather", "3"))
    assert not accepts(tools_request("required"), tool_call("get_weather", '{"town": "Paris"}'))


def test_required_forces_a_call_at_the_start() -> None:
    request = tools_request("required")
    assert accepts(request, PARIS)
    assert accepts(request, "<think>\nweather tool\n</think>\n\n" + PARIS + "\n" + NOON)
    assert not accepts(request, "Free text.")
    assert not accepts(request, "Free text first.\n" + PARIS)
    assert not accepts(request, PARIS + "\nThe weather in Paris is sunny.")  # nothing but calls


def test_named_tool_choice_allows_only_that_tool() -> None:
    request = tools_request({"type": "function", "function": {"name": "get_time"}})
    assert accepts(request, NOON)
    assert not accepts(request, PARIS)
    assert not accepts(request, NOON + "\nDone.")
    assert not accepts(request, NOON + "\n" + NOON)  # a named tool is called once


def test_parallel_off_allows_exactly_one_call() -> None:
    assert accepts(tools_request(parallel=False), "Checking.\n" + PARIS)
    assert not accepts(tools_request(parallel=False), PARIS + "\n" + NOON)
    assert accepts(tools_request("required", parallel=False), PARIS)
    assert not accepts(tools_request("required", parallel=False), PARIS + "\n" + PARIS)


def test_prompt_opened_reasoning_comes_before_the_constraint() -> None:
    thinking = family(chat_template="{{ '<|im_start|>assistant\\n<think>\\n' }}")
    assert accepts(tools_request("required"), "Need weather.\n</think>\n\n" + PARIS, thinking)
    assert not accepts(tools_request("required"), PARIS, thinking)
    request = ChatRequest(messages=[], response_format={"type": "json_object"})
    assert accepts(request, 'Think.</think>\n\n{"a": 1}', thinking)


def test_response_format_json_object_and_json_schema() -> None:
    as_object = ChatRequest(messages=[], response_format={"type": "json_object"})
    assert family().grammar(as_object, family().render(as_object)).kind == "ebnf"
    assert accepts(as_object, '{"any": [1, 2]}')
    assert not accepts(as_object, "plain text")
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    as_schema = ChatRequest(
        messages=[], response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    )
    assert accepts(as_schema, '{"n": 3}')
    assert not accepts(as_schema, '{"n": "three"}')


def test_tools_with_response_format_answer_with_calls_or_the_json() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    assert accepts(tools_request(response_format=fmt), PARIS)
    assert accepts(tools_request(response_format=fmt), '{"n": 1}')
    assert not accepts(tools_request(response_format=fmt), "free text")
    assert not accepts(tools_request("required", response_format=fmt), '{"n": 1}')


def _characters_scanned(tokens: int) -> int:
    """Characters the arguments' scan reads while a bare number of `tokens` three-digit tokens streams in."""
    from gateway.families.hermes import parser as hermes_parser

    class Counting(frozenset):
        scanned = 0

        def __contains__(self, ch: object) -> bool:
            Counting.scanned += 1
            return super().__contains__(ch)

    parser = HermesParser()
    parser.feed([Piece('<tool_call>\n{"name": "f", "arguments": {"a": 1, "b": ')])
    delimiters = hermes_parser._DELIMITERS
    hermes_parser._DELIMITERS = Counting(delimiters)
    try:
        for _ in range(tokens):
            parser.feed([Piece("000")])
        parser.finish()
    finally:
        hermes_parser._DELIMITERS = delimiters
    return Counting.scanned


def test_a_long_bare_number_is_scanned_once_not_again_for_each_token() -> None:
    """A word is held back until it ends; each token of it is read once (a rescan of the word per token was
    quadratic: a model writing 8000 tokens of digits cost 3 CPU seconds on the event loop)."""
    assert _characters_scanned(400) <= 3 * 400 + 10


def test_an_unconstrained_request_gets_no_grammar_without_scanning_its_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    """No response format and no active tools: no grammar, and the prompt is not scanned for an open think block
    (which only a grammar would use)."""
    from gateway.families import chatml

    hermes = family()
    scanned: list[str] = []
    monkeypatch.setattr(chatml, "prompt_opens_reasoning", lambda prompt: scanned.append(prompt) or False)
    plain = ChatRequest(messages=[{"role": "user", "content": "hi"}])
    named_none = ChatRequest(messages=plain.messages, tools=[WEATHER], tool_choice="none")
    assert hermes.grammar(plain, "<think>") is None and hermes.grammar(named_none, "<think>") is None
    assert scanned == []
    assert hermes.grammar(ChatRequest(messages=plain.messages, tools=[WEATHER]), "<think>") is not None
    assert scanned == ["<think>"]


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ('{"name": "f", "arguments": {"a": 1<x>}', []),  # cut short by a `<` that is no marker: held, then no call
        ('{"name": "f", "arguments": {"a": 1<x>}</tool_call>', [{"name": "f", "arguments": '{"a": 1'}]),  # released
        (
            '{"name": "f", "arguments": {"a": 1 <x>}, {"name": "g", "arguments": {}}</tool_call>',
            [{"name": "f", "arguments": '{"a": 1 '}],
        ),
        ('{"name": "f", "arguments": {}}, x, {"name": "g", "arguments": {}}', [{"name": "f", "arguments": "{}"}]),
        ('{"name": "f", "arguments": {}} }, {"name": "g", "arguments": {}}', [{"name": "f", "arguments": "{}"}]),
        (
            '{"name": "f", "arguments": {}}\n, {"name": "g", "arguments": {}}',
            [{"name": "f", "arguments": "{}"}, {"name": "g", "arguments": "{}"}],
        ),
    ],
)
def test_a_call_tail_reads_the_same_however_chunked(text: str, calls: list[dict[str, str]]) -> None:
    """After the arguments, only whitespace, the body's `}` and a `,` listing another call count; anything else
    makes the rest of the block junk, skipped up to `</tool_call>`, whichever chunk the junk came in."""
    text = "<tool_call>" + text
    for splits in ([], list(range(len(text))), *[[at] for at in range(len(text))]):
        assert merge(run(text, splits=splits)[0])["tool_calls"] == calls, splits


_FED_ATOMS = ["<tool_call>", "</tool_call>", "<think>", "</think>", " ", "\n", "hi", "a b", "<", "  x  ", "é"]
_FED_ATOMS += ['{"name": "f", "arguments": {"x": 1}}', ",", "}", '"']
_MARKERS = frozenset(["<tool_call>", "</tool_call>", "<think>", "</think>"])


class _StepsOnly(HermesParser):
    """The parser with every piece through its state steps (no fast path for plain content text)."""

    def feed(self, pieces):
        if self._token_markers and (len(pieces) != 1 or pieces[0].token_id is not None):
            self._mark_tokens(pieces)
        self._buffer += "".join(p.text for p in pieces)
        return self._advance(final=False)


def test_plain_content_pieces_parse_as_the_state_steps_parse_them() -> None:
    """`feed`'s shortcut for one piece of content text with no `<` gives, piece by piece, the deltas the state steps
    give (seeded random outputs of markers, calls and text, as tokens or text, however cut, with every option)."""
    rng = random.Random(13)
    for _ in range(400):
        options = {
            "tool_calls": rng.random() < 0.8,
            "in_reasoning": rng.random() < 0.3,
            "forced_calls": rng.random() < 0.2,
            "continues": rng.random() < 0.2,
            "token_markers": _MARKERS if rng.random() < 0.5 else frozenset(),
        }
        fed: list[list[Piece]] = []
        for atom in (rng.choice(_FED_ATOMS) for _ in range(rng.randint(1, 12))):
            if atom in options["token_markers"] and rng.random() < 0.8:
                fed.append([Piece(atom, 7)])
                continue
            cut = rng.randint(1, len(atom))
            parts = [atom[:cut], atom[cut:]] if cut < len(atom) else [atom]
            fed += [[Piece(p) for p in parts]] if rng.random() < 0.2 else [[Piece(p)] for p in parts]
        ours, steps = HermesParser(**options), _StepsOnly(**options)

        def seen(deltas: list[Delta]) -> list[tuple]:
            return [(d.content, d.reasoning, d.tool_index, d.tool_name, d.tool_arguments) for d in deltas]

        for pieces in fed:
            assert seen(ours.feed(pieces)) == seen(steps.feed(pieces)), (options, fed)
        assert seen(ours.finish()) == seen(steps.finish()), (options, fed)
        assert ours.saw_tool_call == steps.saw_tool_call
