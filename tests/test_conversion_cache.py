"""The conversion cache: a cached GGUF load equals a parse of the file; a bad cache never breaks a load; eviction.

Converted tokenizers: tests/test_tokenizer_cache.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from backends.checkpoint import Checkpoint, embedded_gguf_path, gguf_cache_folder, load_checkpoint
from backends.conversion_cache import (
    CACHE_ENV,
    MAX_BYTES_ENV,
    cache_root,
    evict,
    keyed_folder,
    max_bytes,
    read_cached,
    write_cached,
)
from backends.tiktoken_bpe import tokenizer_from_ranks
from backends.worker import weights as weights_module
from backends.worker.weights import _LAYER_FIELDS, LlamaWeights, load_weights
from tests.tiny_gguf import write_tiny_gguf

METADATA = ("metadata", str(Path(__file__).parents[1] / "backends" / "checkpoint.py"))


def metadata_folder(path: Path) -> Path | None:
    return gguf_cache_folder(path, *METADATA)


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Checkpoint, LlamaWeights]]:
    """A tiny GGUF quantized as the embedded model is (tests/tiny_gguf.py) parsed and dequantized into an empty
    cache, which it fills. The cache's code is the same for any GGUF: the embedded model's 135M weights cost ~10
    CPU-s to dequantize and write here, and every gateway and worker the suite starts reads them from the cache."""
    folder = tmp_path_factory.mktemp("cache")
    write_tiny_gguf(folder / "tiny.gguf", weights=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(folder / "cache"))
        assert not metadata_folder(folder / "tiny.gguf").exists()
        checkpoint = load_checkpoint(folder / "tiny.gguf")
        yield checkpoint, load_weights(checkpoint)


def test_a_second_load_reads_the_converted_copy(cold: tuple[Checkpoint, LlamaWeights]):
    parsed, _ = cold
    folder = metadata_folder(parsed.path)
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint.json", "tokenizer.json"]
    weights = gguf_cache_folder(parsed.path, "float32 weights", weights_module.__file__)
    assert [p.name for p in weights.iterdir()] == ["model.safetensors"]
    cached = load_checkpoint(parsed.path)
    assert cached.path == parsed.path and cached.config == parsed.config
    fields = ("chat_template", "bos_token", "eos_token", "eos_token_ids", "control_token_ids")
    assert [getattr(cached, f) for f in fields] == [getattr(parsed, f) for f in fields]
    assert cached.chat_template and cached.control_token_ids == [0, 1]
    assert cached.tokenizer.to_str() == parsed.tokenizer.to_str()


def test_cached_weights_equal_the_dequantized_ones(cold: tuple[Checkpoint, LlamaWeights]):
    parsed, dequantized = cold
    warm = load_weights(parsed)
    for got, want in zip(warm.layers, dequantized.layers, strict=True):
        for name in _LAYER_FIELDS:
            assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert torch.equal(warm.embedding, dequantized.embedding) and torch.equal(warm.final_norm, dequantized.final_norm)
    assert torch.equal(warm.lm_head, dequantized.embedding)


def test_a_changed_file_parameter_or_converter_gets_a_new_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    copy, converter = tmp_path / "model.gguf", tmp_path / "converter.py"
    write_tiny_gguf(copy)
    converter.write_text("v1")
    before = keyed_folder("gguf", [copy], "p", [converter])
    assert before.parent == tmp_path / "cache" / "gguf"
    assert keyed_folder("gguf", [copy], "p", [converter]) == before
    assert keyed_folder("gguf", [copy], "q", [converter]) != before
    converter.write_text("v2")
    assert keyed_folder("gguf", [copy], "p", [converter]) != before
    converter.write_text("v1")
    os.utime(copy, ns=(0, 1_000_000_000))
    assert keyed_folder("gguf", [copy], "p", [converter]) != before
    assert keyed_folder("gguf", [tmp_path / "absent.gguf"], "p", [converter]) is None


def test_specials_in_the_vocabulary_may_not_clash_with_ordinary_tokens():
    ranks = {bytes([b]): b + 2 for b in range(256)}
    tokenizer = tokenizer_from_ranks(ranks, {0: "<s>", 1: "</s>"}, r"\S+", specials_in_vocab=True)
    assert tokenizer.token_to_id("<s>") == 0 and tokenizer.encode("a</s>").ids == [ord("a") + 2, 1]
    with pytest.raises(ValueError, match="spelled like ordinary tokens"):
        tokenizer_from_ranks(ranks, {0: "a", 1: "</s>"}, r"\S+", specials_in_vocab=True)


def test_a_damaged_file_is_ignored_with_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture):
    (tmp_path / "checkpoint.json").write_text('{"config": {"n_layers": ')
    assert read_cached(tmp_path, "checkpoint.json", lambda p: __import__("json").loads(p.read_text())) is None
    assert "ignoring unreadable" in capsys.readouterr().err
    assert read_cached(tmp_path, "absent.json", Path.read_text) is None
    assert read_cached(None, "checkpoint.json", Path.read_text) is None


def test_writes_are_whole_or_absent(tmp_path: Path, capsys: pytest.CaptureFixture):
    write_cached(tmp_path / "a", "x.txt", lambda p: p.write_text("whole"))
    assert (tmp_path / "a" / "x.txt").read_text() == "whole"

    def fail_halfway(path: Path) -> None:
        path.write_text("half")
        raise OSError("disk full")

    write_cached(tmp_path / "a", "y.txt", fail_halfway)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["x.txt"]  # no temporary left behind
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    write_cached(blocker / "cache", "x.txt", lambda p: p.write_text("never"))
    assert capsys.readouterr().err.count("could not cache") == 2


@pytest.mark.parametrize("value", ["off", "", "0"])
def test_the_cache_can_be_turned_off(monkeypatch: pytest.MonkeyPatch, value: str):
    monkeypatch.setenv(CACHE_ENV, value)
    assert cache_root() is None and metadata_folder(embedded_gguf_path()) is None


def test_the_default_root_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root() == tmp_path / "llm-gateway"


# Eviction: least recently used entries beyond the size cap, never one another process holds.


def entry(root: Path, name: str, size: int, used_at: float | None = None) -> Path:
    folder = root / "gguf" / name
    write_cached(folder, "data.bin", lambda p: p.write_bytes(b"x" * size))
    if used_at is not None:
        os.utime(folder, (used_at, used_at))
    return folder


@pytest.fixture
def small_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache root whose entries may total 2,500 bytes."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(MAX_BYTES_ENV, "2500")
    return tmp_path


def test_the_least_recently_used_entries_go_first(small_cache: Path):
    old, used = entry(small_cache, "old", 1000, used_at=1_000), entry(small_cache, "used", 1000, used_at=2_000)
    (small_cache / "tokenizers").mkdir()
    (small_cache / "other").mkdir()
    (small_cache / "other" / "big.bin").write_bytes(b"x" * 5000)  # not an entry: the root may hold other things
    entry(small_cache, "new", 1000)  # 3,000 bytes: the oldest goes
    assert not old.exists() and used.exists() and (small_cache / "other" / "big.bin").exists()
    assert read_cached(used, "data.bin", Path.read_bytes) == b"x" * 1000  # a read renews it
    newer = entry(small_cache, "newer", 1000)
    assert sorted(p.name for p in (small_cache / "gguf").iterdir()) == ["newer", "used"]
    entry(small_cache, "huge", 4000)  # alone over the cap: kept, everything else goes
    assert [p.name for p in (small_cache / "gguf").iterdir()] == ["huge"] and not newer.exists()


HOLDER = """
import sys
from pathlib import Path
from backends.conversion_cache import read_cached

def read(path):
    print("reading", flush=True)
    sys.stdin.readline()
    return path.read_text()

print(read_cached(Path(sys.argv[1]), "data.bin", read), flush=True)
"""


def test_an_entry_another_process_is_reading_is_not_removed(small_cache: Path):
    held = entry(small_cache, "held", 2000, used_at=1_000)
    reader = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(held)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1],
    )  # fmt: skip
    try:
        assert reader.stdout.readline() == "reading\n"  # the reader holds the entry
        entry(small_cache, "new", 1000)  # over the cap, but the oldest is in use
        assert held.exists() and (small_cache / "gguf" / "new").exists()
        reader.stdin.write("\n")
        reader.stdin.flush()
        assert reader.stdout.readline() == "x" * 2000 + "\n" and reader.wait(30) == 0
    finally:
        reader.kill()
    os.utime(held, (1_000, 1_000))
    evict(small_cache)
    assert not held.exists() and read_cached(held, "data.bin", Path.read_bytes) is None


def test_what_an_interrupted_eviction_left_is_removed(small_cache: Path):
    kept = entry(small_cache, "kept", 100)
    left = small_cache / "gguf" / ".evicted-gone.123"
    left.mkdir()
    (left / "data.bin").write_bytes(b"x" * 100)
    evict(small_cache)
    assert [p.name for p in (small_cache / "gguf").iterdir()] == ["kept"] and kept.exists()


@pytest.mark.parametrize(("value", "limit"), [("", 4 << 30), ("1000", 1000), ("lots", 4 << 30)])
def test_the_size_cap_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, limit: int):
    monkeypatch.setenv(MAX_BYTES_ENV, value)
    assert max_bytes() == limit
