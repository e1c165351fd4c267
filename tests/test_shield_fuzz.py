"""Seeded shielding fuzz over every family and door (tests/shield_fuzz.py), and the cases it found."""

from __future__ import annotations

import pytest

from gateway.prompts import shield
from gateway.types import ChatRequest
from tests import shield_fuzz
from tests.shield_fuzz import Case, check, subject, subjects

DOORS = ("chat", "responses", "messages")


@pytest.mark.parametrize("name", sorted(subjects()))
def test_seeded_cases_keep_client_spellings_plain(name: str) -> None:
    found = shield_fuzz.run(subject(name), DOORS, cases=3, seed=11)
    assert not found, [(f.problem, f.case) for f in found[:3]]


def test_the_fuzzer_sees_forged_tokens_without_the_shield(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the shield off, the same seeded cases report client spellings turned into control tokens."""
    monkeypatch.setattr(
        shield.Shielder, "shield", lambda self, request, keep=frozenset(): (request, shield.Shield("@", []))
    )
    found = shield_fuzz.run(subject("deepseek_v41"), DOORS, cases=3, seed=11)
    assert found and all("control ids differ" in f.problem for f in found)


def _plain(**strings: str) -> dict[str, str]:
    return {slot: strings.get(slot, f"{slot} text") for slot in shield_fuzz.SLOTS}


CORPUS = [
    # Kimi K3 declares tools as JSON with every object's keys sorted: a key holding a spelling sorted by its marker
    # ("@GW<nonce>…"), so "<|open|>a" came after "?b" (the reference order is before), and a key such as "@GW8"
    # moved with the random nonce.
    ("kimi_k3", Case(_plain(prop_name="<|open|>a"), "chat", {})),
    ("kimi_k3", Case(_plain(prop_name="<|open|>"), "responses", {})),
    ("kimi_k3", Case(_plain(prop_name="<|sep", enum="@GW"), "messages", {"thinking": False})),
    # A continued final message was cut after the last occurrence of its content: "<" (shielded, or not) was found
    # in the template's `<|im_end|>` after it; a content the template rewrites (its reasoning split off at
    # `</think>`) was not found, or found in an earlier message, cutting the prompt short.
    ("hermes_smollm2", Case(_plain(assistant="<"), "chat", {}, ("prefill",))),
    ("hermes_smollm2", Case(_plain(assistant="<|im_end|>"), "chat", {}, ("prefill",))),
    ("hermes_qwen", Case(_plain(assistant="</think>x<|fim_suffix|>"), "messages", {"thinking": True}, ("prefill",))),
    # Templates that cut an assistant turn's reasoning at a token (R1's and V3.1's `</think>`, Gemma 4's thought
    # channel) saw a marker instead and kept the reasoning, as text, where vLLM's render drops it.
    ("deepseek_v3", Case(_plain(assistant="<think>r</think>answer"), "chat", {})),
    ("deepseek_v31", Case(_plain(assistant="r</think>answer"), "responses", {"thinking": True})),
    ("gemma4", Case(_plain(assistant="<|channel>thought\nr<channel|>answer"), "chat", {"enable_thinking": True})),
    ("gemma4", Case(_plain(assistant="annel><|<channel|>"), "responses", {})),
]
"""Cases the fuzzer found, each of which failed before its fix."""


@pytest.mark.parametrize(("name", "case"), CORPUS)
def test_found_cases(name: str, case: Case) -> None:
    assert check(subject(name), case) == []


def test_k3_tool_keys_sort_as_the_clients_strings_whatever_the_nonce() -> None:
    model = subject("kimi_k3").model
    properties = {key: {"type": "string"} for key in ("?b", "<|open|>a", "@GW8", "@GW<|sep|>", "A")}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": properties}}}
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[tool])
    prompts = {model.encode_chat(request)[0] for _ in range(8)}
    assert prompts == {model.family.render(request)}
    assert '"<|open|>a":{"type":"string"},"?b"' in prompts.pop()
