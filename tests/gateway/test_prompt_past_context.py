"""A prompt whose length in characters proves it past the context is refused before it is encoded (chat doors and
each completions prompt: the same 400 as one encoded and found too long); /tokenize still counts it, as vLLM's."""

from __future__ import annotations

import asyncio

import pytest

from gateway.api.completions import _prompts_ids
from gateway.errors import APIError
from gateway.models.planning import encode_chat
from gateway.types import ChatRequest


class _CountingTokenizer:
    """The plain tokenizer, counting the characters it is asked to encode."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.encoded = 0

    def encode_batch_fast(self, texts, **kwargs):
        self.encoded += sum(map(len, texts))
        return self._tokenizer.encode_batch_fast(texts, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


@pytest.fixture
def model(tokenize_only, monkeypatch):
    bound = tokenize_only.encoder.text_bound
    assert bound is not None
    monkeypatch.setattr(tokenize_only.encoder, "_plain", _CountingTokenizer(tokenize_only.encoder._plain))
    return tokenize_only


def _past_context(model) -> str:
    """A text of fresh characters one more than `context - 1` tokens can stand for, at most."""
    bound = model.encoder.text_bound
    return "é" * (bound.chars_per_token * (model.context_length - 1) + 1)


def test_a_chat_past_the_context_by_its_length_is_refused_unencoded(model):
    chat = ChatRequest(messages=[{"role": "user", "content": _past_context(model)}])
    with pytest.raises(APIError) as refused:
        encode_chat(model, chat, "input")
    error = refused.value
    assert (error.status, error.param, error.code) == (400, "input", "context_length_exceeded")
    assert f"this model's context is {model.context_length} tokens" in error.message
    assert model.encoder._plain.encoded == 0


def test_a_completions_prompt_past_the_context_by_its_length_is_refused_unencoded(model):
    with pytest.raises(APIError) as refused:
        asyncio.run(_prompts_ids(model, ["a", _past_context(model)], True))
    assert (refused.value.param, refused.value.code) == ("prompt[1]", "context_length_exceeded")
    assert model.encoder._plain.encoded == 0


def test_tokenize_counts_a_chat_past_the_context_and_short_prompts_are_encoded(model):
    text = "x" * (model.context_length + 10)  # past the context in tokens, within the bound's characters
    chat = ChatRequest(messages=[{"role": "user", "content": text}])
    assert len(encode_chat(model, chat, past_context_ok=True)[1]) > 0
    ((ids, _),) = asyncio.run(_prompts_ids(model, [text], False))
    assert ids == model.tokenizer.encode(text, add_special_tokens=False).ids
