"""Mistral call ids: the gateway's are 9 alphanumerics, and a replayed history renders with Mistral's real templates
(which raise on any other id) whatever shape the client's ids have, each call still matching its result."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from backends.detokenizer import Detokenizer
from gateway.families import get_family
from gateway.families.base import Family
from gateway.families.mistral import tekken_tokenizer
from gateway.families.mistral.call_ids import CallIdMap, new_mistral_call_id, with_template_call_ids
from gateway.ids import new_call_id, tool_use_id
from gateway.types import ChatRequest
from gateway.validation.chat import parse_chat_completion
from gateway.validation.messages import parse_messages_request
from tests.family_checks import added_tokens, feed, tokenize_only_model

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
CHECKING = [  # templates that raise on an id that is not 9 characters (>= 9 for vLLM's), with their id's spelling
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", '"id": "{}"', '"call_id": "{}"'),
    ("llama.cpp-Mistral-Small-3.2-24B-Instruct-2506.jinja", "[CALL_ID]{}", "[TOOL_RESULTS]{}[TOOL_CONTENT]"),
    ("vllm-mistral-parallel.jinja", '"id": "{}"', '"call_id": "{}"'),
]
NINE = re.compile(r"[A-Za-z0-9]{9}")
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


@pytest.fixture(scope="module")
def context() -> Any:
    return tokenize_only_model("mistral-small", tekken_tokenizer(), "mistral").family.context


def family(context: Any, template: str) -> Family:
    source = (TEMPLATES / template).read_text(encoding="utf-8")
    return get_family("mistral")(replace(context, chat_template=source, bos_token="<s>", eos_token="</s>"))


def openai_history(*call_ids: str) -> dict[str, Any]:
    """A 2-turn chat body replaying calls with `call_ids` and their results."""
    calls = [{"id": i, "type": "function", "function": {"name": "get_weather", "arguments": "{}"}} for i in call_ids]
    results = [{"role": "tool", "tool_call_id": i, "content": f"result of {n}"} for n, i in enumerate(call_ids)]
    return {
        "model": "m",
        "tools": [WEATHER],
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            *results,
            {"role": "assistant", "content": "Cold."},
            {"role": "user", "content": "And tomorrow?"},
        ],
    }


def assert_matched(prompt: str, call_spelling: str, result_spelling: str, n: int) -> None:
    """`n` distinct 9-character ids, each written once for its call and once for its result."""
    call_ids = re.findall(re.escape(call_spelling).replace(r"\{\}", '([^"\\[]*)'), prompt)
    result_ids = re.findall(re.escape(result_spelling).replace(r"\{\}", '([^"\\[]*)'), prompt)
    assert call_ids == result_ids and len(set(call_ids)) == n, prompt
    assert all(NINE.fullmatch(i) for i in call_ids)


@pytest.mark.parametrize(("template", "call_spelling", "result_spelling"), CHECKING)
def test_gateway_and_client_ids_in_history_render(context, template, call_spelling, result_spelling) -> None:
    """The ids the gateway gives (`call_…` before this, the Messages door's `toolu_…`, the family's own) and short or
    odd client ids: each template raised on them before the family mapped them."""
    ids = [new_call_id(), tool_use_id(), new_mistral_call_id(), "call_1", "fc-ü/7", "x" + new_call_id()[-9:]]
    chat = parse_chat_completion(openai_history(*ids)).chat
    prompt = family(context, template).render(chat)
    assert_matched(prompt, call_spelling, result_spelling, len(ids))


def test_a_messages_history_renders(context) -> None:
    """An Anthropic client replays the `toolu_…` id the Messages door gave it."""
    call_id = tool_use_id()
    body = {
        "model": "m",
        "max_tokens": 10,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": "get_weather", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "-3 C"}]},
        ],
    }
    prompt = family(context, CHECKING[0][0]).render(parse_messages_request(body).chat)
    assert f'"id": "{call_id[-9:]}"' in prompt and f'"call_id": "{call_id[-9:]}"' in prompt


def test_the_parser_gives_ids_the_templates_take_back(context) -> None:
    tokenizer = tekken_tokenizer()
    mistral = family(context, CHECKING[1][0])
    request = ChatRequest(messages=[{"role": "user", "content": "Weather?"}], tools=[WEATHER])
    plain = tokenizer.encode("get_weather", add_special_tokens=False).ids
    output = [9, *plain, 32, *tokenizer.encode("{}", add_special_tokens=False).ids]  # [TOOL_CALLS]NAME[ARGS]{}
    deltas = feed(mistral.parser(request, ""), Detokenizer(tokenizer, added_tokens(tokenizer)), output)
    (call_id,) = [d.tool_id for d in deltas if d.tool_id]
    assert NINE.fullmatch(call_id)
    prompt = mistral.render(parse_chat_completion(openai_history(call_id)).chat)
    assert f"[CALL_ID]{call_id}" in prompt and f"[TOOL_RESULTS]{call_id}[TOOL_CONTENT]" in prompt


def test_the_map_keeps_distinct_ids_distinct() -> None:
    ids = CallIdMap()
    a, b = "call_123456789", "toolu_123456789"  # the same last 9 characters
    assert ids(a) == "123456789" and NINE.fullmatch(ids(b)) and ids(b) != ids(a)
    assert ids(a) == "123456789" and ids("abcdefghi") == "abcdefghi"
    assert NINE.fullmatch(ids("1")) and NINE.fullmatch(ids("a_b-c.d/e:f")) and NINE.fullmatch(ids("x" * 9 + "é"))


def test_messages_without_ids_are_left_alone() -> None:
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f"}}]},
        {"role": "tool", "content": "r"},
    ]
    assert with_template_call_ids(messages) == messages
