"""Planning a costly chat on a worker thread gives exactly the plan the event loop would have made."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import orjson
import pytest

from gateway.api.completions import _prompts_ids
from gateway.models import planning
from gateway.models.planning import plan_chat, plan_chat_off_loop
from gateway.validation.chat import parse_chat_completion


def chat_of(messages: int, **extra):
    body = {
        "model": "m",
        "messages": [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"hi <|im_start|> {i}"} for i in range(messages)
        ],
        **extra,
    }
    return parse_chat_completion(body)


@pytest.mark.parametrize("messages", [1, 301])
def test_the_plan_is_the_same_on_and_off_the_loop(tokenize_only, messages):
    parsed = chat_of(messages)
    on_loop = plan_chat(tokenize_only, parsed.chat, parsed.settings)
    off_loop = asyncio.run(plan_chat_off_loop(tokenize_only, parsed.chat, parsed.settings))
    assert (off_loop.prompt, off_loop.ids, off_loop.sampling) == (on_loop.prompt, on_loop.ids, on_loop.sampling)


USER_AGAIN = {"role": "user", "content": "and?"}


def test_only_costly_chats_leave_the_loop():
    assert planning._cheap(chat_of(3).chat)
    assert not planning._cheap(chat_of(planning.OFF_LOOP_MESSAGES + 1).chat)
    assert not planning._cheap(chat_of(1, response_format={"type": "json_object"}).chat)
    big = parse_chat_completion(
        {"model": "m", "messages": [{"role": "user", "content": "x" * (planning.OFF_LOOP_CHARS + 1)}]}
    )
    assert not planning._cheap(big.chat)
    long = "x" * (planning.OFF_LOOP_CHARS + 1)  # client text the template renders, outside any content
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": orjson.dumps({"a": long}).decode()}}
    for said in ({"reasoning_content": long}, {"tool_calls": [call]}):
        turns = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", **said}]
        turns += [{"role": "tool", "tool_call_id": "c1", "content": "r"}] if "tool_calls" in said else []
        assert not planning._cheap(parse_chat_completion({"model": "m", "messages": [*turns, USER_AGAIN]}).chat)
    kwargs = parse_chat_completion({"model": "m", "messages": [USER_AGAIN], "chat_template_kwargs": {"k": long}})
    assert not planning._cheap(kwargs.chat)


def test_a_costly_chat_is_planned_on_another_thread(tokenize_only):
    parsed = chat_of(planning.OFF_LOOP_MESSAGES + 1)
    threads = []
    original = tokenize_only.encode_chat

    class Watching:
        """The served model, noting the thread each encode runs on."""

        def __getattr__(self, name):
            return getattr(tokenize_only, name)

        def encode_chat(self, chat, past_context_ok=False):
            threads.append(threading.get_ident())
            return original(chat, past_context_ok)

    asyncio.run(plan_chat_off_loop(Watching(), parsed.chat, parsed.settings))
    assert threads and threads[0] != threading.get_ident()


def test_stop_ids_are_looked_up_once_per_model(tokenize_only, monkeypatch):
    """The family's stop ids (a vocabulary lookup) are the model's, kept: every plan carries them, unless the
    request ignores eos."""
    expected = tokenize_only.family.stop_token_ids()
    assert expected and list(tokenize_only.stop_token_ids) == expected
    monkeypatch.setattr(type(tokenize_only.family), "stop_token_ids", lambda self: pytest.fail("looked up again"))
    parsed = chat_of(1)
    assert plan_chat(tokenize_only, parsed.chat, parsed.settings).sampling.stop_token_ids == expected
    ignoring = chat_of(1, ignore_eos=True)
    assert plan_chat(tokenize_only, ignoring.chat, ignoring.settings).sampling.stop_token_ids == []


def test_raw_prompt_texts_leave_the_loop_by_the_same_rule(tokenize_only):
    """/v1/completions' texts (together: up to 16 prompts, each up to ~650K characters under the context bound)
    and /tokenize's prompt are encoded on a worker thread past the chat's character rule, the same ids as on the
    loop; token-id prompts are kept as they are."""
    threads = []
    encoder = tokenize_only.encoder

    def encode_prompt(text, add_special_tokens=False):
        threads.append(threading.get_ident())
        return encoder.encode_prompt(text, add_special_tokens=add_special_tokens)

    class Watching:
        """The served model, noting the thread each prompt text is encoded on."""

        encoder = SimpleNamespace(encode_prompt=encode_prompt)

        def __getattr__(self, name):
            return getattr(tokenize_only, name)

    half = "ab " * (planning.OFF_LOOP_CHARS // 6 + 1)
    for texts, away in (([half], False), ([half, half], True)):
        threads.clear()
        prompts = [*texts, [1, 2]]
        ids = asyncio.run(_prompts_ids(Watching(), prompts, add_special_tokens=True))
        assert [i for i, _ in ids] == [encoder.encode_prompt(t, add_special_tokens=True) for t in texts] + [[1, 2]]
        assert [p for _, p in ids] == [f"prompt[{i}]" for i in range(len(prompts))]
        assert len(threads) == len(texts) and (threads[0] != threading.get_ident()) is away
