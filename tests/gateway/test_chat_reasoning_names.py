"""A chat answer's reasoning under both names clients read: vLLM's `reasoning` and DeepSeek's `reasoning_content`."""

from __future__ import annotations

from gateway.api.chat import REASONING_NAMES, ChatRenderer
from gateway.types import ChatRequest, ChoiceStep, Piece


def test_reasoning_goes_out_under_both_names_in_each_delta_and_in_the_folded_message(tokenize_only):
    """vllm#27752 named it `reasoning` (vllm#33402 removed `reasoning_content`); clients written for DeepSeek's API
    and older vLLM read `reasoning_content` alone (Dify, the AI SDK's multi-turn threading)."""
    chat = ChatRequest(messages=[{"role": "user", "content": "hi"}])
    renderer = ChatRenderer(1, lambda: tokenize_only.family.parser(chat, ""), None, 3, tokenize_only.count_tokens)
    said = ["<think>", "plan", " more", "</think>", "done"]
    chunks = [
        c for i, text in enumerate(said) for c in renderer.step(0, ChoiceStep([Piece(text)], completion_tokens=i + 1))
    ]
    chunks += renderer.step(0, ChoiceStep([], finish_reason="stop", completion_tokens=len(said)))
    reasoning = [c["delta"] for c in chunks if any(name in c["delta"] for name in REASONING_NAMES)]
    assert reasoning and all(d["reasoning"] == d["reasoning_content"] for d in reasoning)
    assert "".join(d["reasoning"] for d in reasoning) == "plan more"
    (choice,) = renderer.fold(chunks)
    message = choice["message"]
    assert (message["reasoning"], message["reasoning_content"], message["content"]) == (
        "plan more",
        "plan more",
        "done",
    )
    assert renderer.usage()["completion_tokens_details"]["reasoning_tokens"] > 0  # the reasoning counted once
