"""Converted tokenizers cached on disk (`backends/conversion_cache.py`), on mistral-common's SentencePiece v3 model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from backends.conversion_cache import CACHE_ENV, cache_key
from backends.sentencepiece_tokenizer import load_sentencepiece
from gateway.families.mistral.family import mistral_common_data

V3 = mistral_common_data("mistral_instruct_tokenizer_240323.model.v3")
TINY = Tokenizer.from_str(
    json.dumps({"version": "1.0", "model": {"type": "WordLevel", "vocab": {"tiny": 0}, "unk_token": "tiny"}})
)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    return tmp_path / "tokenizers"


def test_a_conversion_is_written_once_then_read(cache: Path) -> None:
    converted = load_sentencepiece(V3)
    (entry,) = cache.iterdir()
    written = entry / "tokenizer.json"
    assert entry.name == cache_key([V3], [])[:24] and written.read_text(encoding="utf-8") == converted.to_str()
    written.write_text(TINY.to_str(), encoding="utf-8")  # what is there is what a second load returns
    assert load_sentencepiece(V3).get_vocab() == {"tiny": 0}
    written.write_text('{"not": "a tokenizer"', encoding="utf-8")  # broken: converted again and replaced
    assert load_sentencepiece(V3).to_str() == converted.to_str() == written.read_text(encoding="utf-8")


def test_the_key_follows_the_sources_bytes_and_the_parameters(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"one")
    b.write_bytes(b"one")
    assert cache_key([a], ["x"]) == cache_key([b], ["x"]) != cache_key([a], ["y"])
    b.write_bytes(b"two")
    assert cache_key([a], ["x"]) != cache_key([b], ["x"])


def test_off_or_unwritable_only_converts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, "off")
    assert load_sentencepiece(V3).get_vocab_size() == 32768 and not list(tmp_path.iterdir())
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "file"))  # its tokenizers/ folder cannot be made
    assert load_sentencepiece(V3).get_vocab_size() == 32768 and [p.name for p in tmp_path.iterdir()] == ["file"]
