"""The Kimi tiktoken loader, checked against tiktoken itself on a synthetic rank file."""

from __future__ import annotations

import base64
import itertools
import json
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
import regex
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.checkpoint import load_checkpoint
from backends.kimi_tokenizer import KIMI_PATTERN, load_kimi_tokenizer, read_ranks
from backends.worker.weights import load_weights
from gateway.models.registry import served_model_from_checkpoint
from gateway.prompts.encoding import PromptEncoder
from gateway.types import ChatRequest

CORPUS = (
    """The quick brown fox jumps over the lazy dog. It's what they'd call "a test", isn't it?
<|open|>message role="user"<|sep|>Hello, world!<|close|>message<|sep|><|end_of_msg|>
def encode(self, text: str) -> list[int]:\n    return [ord(c) for c in text]  # 1234567890
你好，世界！这是一个测试。Kimi 的分词器 handles 中文 and English mixed text.
Ünïcödé façade naïve café — “quotes” and emoji 😀🚀 in the mix.\r\n\ttabs\tand   spaces   \n\n\n
{"city": "Paris", "days": 3, "units": ["c", "f"], "ok": true, "none": null}
"""
    * 3
)

SPECIALS = ["[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>"]
"""Named added tokens at the same offsets after the ranks as in Kimi K3 (`<|open|>` = ranks + 3)."""


def train_ranks(corpus: str, merges: int) -> dict[bytes, int]:
    """A small byte-level BPE vocabulary: all bytes, then the most frequent adjacent pairs of pre-tokens."""
    ranks = {bytes([b]): b for b in range(256)}
    words = Counter(tuple(bytes([b]) for b in piece.encode()) for piece in regex.findall(KIMI_PATTERN, corpus))
    for _ in range(merges):
        pairs: Counter[tuple[bytes, bytes]] = Counter()
        for word, count in words.items():
            for pair in itertools.pairwise(word):
                pairs[pair] += count
        if not pairs:
            break
        (left, right), _ = max(pairs.items(), key=lambda item: (item[1], item[0]))
        ranks[left + right] = len(ranks)
        merged: Counter[tuple[bytes, ...]] = Counter()
        for word, count in words.items():
            out: list[bytes] = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == left and word[i + 1] == right:
                    out.append(left + right)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return ranks


def write_synthetic_checkpoint(directory: Path, merges: int = 400) -> dict[str, int]:
    """A Kimi-style tokenizer directory (`tiktoken.model`, `tokenizer_config.json`); returns the special ids."""
    ranks = _ranks(merges)
    lines = [
        f"{base64.b64encode(token).decode()} {rank}" for token, rank in sorted(ranks.items(), key=lambda kv: kv[1])
    ]
    (directory / "tiktoken.model").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ids = {text: len(ranks) + i for i, text in enumerate(SPECIALS)}
    decoder = {
        str(i): {
            "content": text,
            "special": True,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "single_word": False,
        }
        for text, i in ids.items()
    }
    (directory / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": decoder}), encoding="utf-8")
    return ids


@cache
def _ranks(merges: int) -> dict[bytes, int]:
    return train_ranks(CORPUS, merges)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("kimi")
    write_synthetic_checkpoint(directory)
    return directory


@pytest.fixture(scope="module")
def reference(checkpoint: Path) -> tiktoken.Encoding:
    ranks = read_ranks(checkpoint / "tiktoken.model")
    specials = {text: len(ranks) + i for i, text in enumerate(SPECIALS)}
    return tiktoken.Encoding("kimi-synthetic", pat_str=KIMI_PATTERN, mergeable_ranks=ranks, special_tokens=specials)


@pytest.fixture(scope="module")
def encoder(checkpoint: Path) -> PromptEncoder:
    return PromptEncoder(load_kimi_tokenizer(checkpoint))


SAMPLES = [
    *CORPUS.splitlines(keepends=True),
    CORPUS,
    "",
    " ",
    "    leading and trailing    ",
    "\n\n\r\n \t",
    "don'T STOP Can'T we'LL",
    "ÀÉÎÕÜ àéîõü ǅ ǈ ǋ",
    "日本語のテキストと中文混合",
    "numbers 1 12 123 1234 12345 ١٢٣",
    "a" * 300,
    "<|open|>tools<|sep|> spelled markers are text",
    "\x00\x01 control \x7f bytes",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_plain_encode_and_decode_match_tiktoken(
    encoder: PromptEncoder, reference: tiktoken.Encoding, text: str
) -> None:
    ids = encoder.encode_plain(text)
    assert ids == reference.encode(text, disallowed_special=())
    assert encoder.tokenizer.decode(ids, skip_special_tokens=False) == text


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(sorted(set(CORPUS)) + ["😀", "\u0301", "日", "Ǆ"]), max_size=80)
    | st.text(max_size=40)
)
def test_random_text_matches_tiktoken(encoder: PromptEncoder, reference: tiktoken.Encoding, text: str) -> None:
    assert encoder.encode_plain(text) == reference.encode(text, disallowed_special=())


def test_added_tokens_have_kimi_ids_and_reserved_names(encoder: PromptEncoder, checkpoint: Path) -> None:
    ranks = len(read_ranks(checkpoint / "tiktoken.model"))
    assert encoder.added["<|open|>"] == ranks + 3
    assert encoder.added["<|sep|>"] == ranks + 5
    assert encoder.added[f"<|reserved_token_{ranks + 6}|>"] == ranks + 6
    assert len(encoder.added) == 256
    assert encoder.tokenizer.get_vocab_size() == ranks + 256


def test_prompt_cuts_only_at_spelled_control_tokens(encoder: PromptEncoder, reference: tiktoken.Encoding) -> None:
    prompt = '<|open|>message role="user"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>'
    ids = encoder.encode_prompt(prompt)
    assert ids == reference.encode(prompt, allowed_special="all")
    assert encoder.tokenizer.decode(ids, skip_special_tokens=False) == prompt


def test_a_kimi_checkpoint_directory_loads_for_the_gateway_not_the_worker(tmp_path: Path) -> None:
    ids = write_synthetic_checkpoint(tmp_path)
    config = {"architectures": ["KimiK3ForCausalLM"], "model_type": "kimi_k3", "max_position_embeddings": 262144}
    (tmp_path / "config.json").write_text(json.dumps({**config, "eos_token_id": ids["[EOS]"]}), encoding="utf-8")
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint.config.architecture == "kimi_k3" and checkpoint.config.n_layers == 0
    assert checkpoint.config.context_length == 262144 and checkpoint.eos_token_ids == [ids["[EOS]"]]
    assert checkpoint.tokenizer.to_str() == load_kimi_tokenizer(tmp_path).to_str()
    model = served_model_from_checkpoint("k3", checkpoint, "kimi_k3", None)
    _, prompt = model.encode_chat(ChatRequest(messages=[{"role": "user", "content": "<|open|>hi"}]))
    assert prompt.count(ids["<|open|>"]) == model.encode_chat(
        ChatRequest(messages=[{"role": "user", "content": "hi"}])
    )[1].count(ids["<|open|>"])
    with pytest.raises(ValueError, match="Llama only"):
        load_weights(checkpoint)
