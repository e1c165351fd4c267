"""`ChatMLFamily`, the base hermes and qwen3_xml share: the tokens kept in assistant history, and a think block
that the generation prompt (and only it) reopened."""

from __future__ import annotations

import pytest

from gateway.families.chatml import ChatMLFamily
from gateway.families.hermes import HermesFamily
from gateway.families.qwen3_xml import Qwen3XmlFamily
from gateway.types import ChatRequest

OPEN = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"


@pytest.mark.parametrize("family", [HermesFamily, Qwen3XmlFamily])
def test_chatml_families_keep_think_and_tool_call_tokens(family: type[ChatMLFamily]) -> None:
    assert family.keep_in_assistant == {"<think>", "</think>", "<tool_call>", "</tool_call>"}


@pytest.mark.parametrize(
    ("generation_prompt", "prompt", "opens"),
    [(True, OPEN, True), (False, OPEN, False), (True, OPEN + "plan</think>\n\n", False)],
)
def test_only_a_generation_prompt_reopens_reasoning(generation_prompt: bool, prompt: str, opens: bool) -> None:
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], add_generation_prompt=generation_prompt)
    assert ChatMLFamily.opens_reasoning(request, prompt) is opens
