"""Qwen's rank files as tokenizers: the fixtures' recorded ids, the published added-token ids, the checkpoint."""

from __future__ import annotations

import pytest
from canitoolcall.fixtures import load_fixtures

from backends.checkpoint import load_checkpoint
from backends.qwen_tokenizer import vocabulary_for_model

FIXTURES = [f for f in load_fixtures(None, families=["qwen3-hermes", "qwen3-xml"]) if f.output_token_ids]


@pytest.fixture(scope="module")
def checkpoints():
    return {v: load_checkpoint(f"package:qwen_tokenizer/{v}") for v in ("qwen3", "qwen3.5")}


def test_every_qwen_fixture_has_recorded_ids() -> None:
    assert len(FIXTURES) == 104


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda f: f.id)
def test_encoding_is_the_recorded_ids(checkpoints, fixture) -> None:
    tokenizer = checkpoints[vocabulary_for_model(fixture.reference_model)].tokenizer
    assert tokenizer.encode(fixture.raw_output, add_special_tokens=False).ids == list(fixture.output_token_ids)
    assert tokenizer.decode(list(fixture.output_token_ids), skip_special_tokens=False) == fixture.raw_output


@pytest.mark.parametrize(
    ("vocabulary", "published"),
    [
        ("qwen3", {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<tool_call>": 151657,
                   "</tool_call>": 151658, "<tool_response>": 151665, "<think>": 151667, "</think>": 151668}),
        ("qwen3.5", {"<|endoftext|>": 248044, "<|im_start|>": 248045, "<tool_call>": 248058, "<think>": 248068,
                     "</think>": 248069, "<|audio_pad|>": 248076}),
    ],
)  # fmt: skip
def test_added_tokens_are_single_tokens_at_their_published_ids(checkpoints, vocabulary, published) -> None:
    tokenizer = checkpoints[vocabulary].tokenizer
    for text, token_id in published.items():
        assert tokenizer.token_to_id(text) == token_id
        assert tokenizer.encode(f"a{text}b", add_special_tokens=False).ids[1] == token_id


def test_checkpoint_stops_and_control_tokens(checkpoints) -> None:
    qwen3 = checkpoints["qwen3"]
    assert load_checkpoint("package:qwen_tokenizer").tokenizer.get_vocab_size() == 151669
    assert qwen3.eos_token == "<|im_end|>" and qwen3.eos_token_ids == [151645, 151643]
    assert qwen3.chat_template is None
    assert 151644 in qwen3.control_token_ids and 151657 not in qwen3.control_token_ids  # <tool_call> is not special


def test_text_is_nfc_normalized(checkpoints) -> None:
    tokenizer = checkpoints["qwen3"].tokenizer
    assert tokenizer.encode("cafe\u0301", add_special_tokens=False).ids == tokenizer.encode("café").ids


@pytest.mark.parametrize(
    ("repo", "vocabulary"),
    [("Qwen/Qwen3-0.6B", "qwen3"), ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3"), ("Qwen/Qwen3-Coder-Next", "qwen3"),
     ("Qwen/Qwen3.5-9B", "qwen3.5"), ("Qwen/Qwen3.8-27B", "qwen3.5"), ("Qwen/Qwen2.5-7B-Instruct", "qwen3")],
)  # fmt: skip
def test_vocabulary_for_model(repo: str, vocabulary: str) -> None:
    assert vocabulary_for_model(repo) == vocabulary


def test_unknown_vocabulary_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown Qwen vocabulary"):
        load_checkpoint("package:qwen_tokenizer/qwen9")
