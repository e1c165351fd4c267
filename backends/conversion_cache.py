"""Conversions kept on disk: a GGUF's parsed metadata and float32 weights, tokenizers converted from vocabulary files.

Reading a GGUF file means walking every metadata field (the whole vocabulary and merge list, ~3 s of CPU for the
embedded model) and dequantizing every tensor (~4.5 s); building a `tokenizers` BPE from tiktoken ranks, a tekken or
a SentencePiece file takes 2-5 s. Each result is kept under the cache root (`LLM_GATEWAY_CACHE_DIR`, else
`$XDG_CACHE_HOME/llm-gateway`, else `~/.cache/llm-gateway`; `LLM_GATEWAY_CACHE_DIR=off` turns the cache off), named
after what it depends on: a GGUF's resolved path, size and modification time (a tokenizer: its source files' bytes),
the conversion's parameters, and the source code of the modules that convert. A changed file, parameter or converter
gets a new name, never a stale result. Files are written under a temporary name and renamed, so a reader never sees
half a file; a damaged or unwritable cache only warns, and the conversion runs.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import TypeVar

from tokenizers import Tokenizer

CACHE_ENV = "LLM_GATEWAY_CACHE_DIR"
_T = TypeVar("_T")


def cache_root() -> Path | None:
    """Where conversions live; None when the cache is turned off."""
    told = os.environ.get(CACHE_ENV)
    if told is not None:
        return None if told.strip().lower() in ("", "off", "0", "false", "none") else Path(told)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-gateway"


def keyed_folder(kind: str, sources: Iterable[Path], parameters: object, code: Iterable[str | Path]) -> Path | None:
    """The folder of one conversion of `sources` (it may not exist yet): `kind` names the conversion, `parameters`
    (by its repr) and the source files `code` are what else it depends on. None when the cache is off or a source
    cannot be read."""
    root = cache_root()
    if root is None:
        return None
    digest = hashlib.sha256(repr(parameters).encode())
    try:
        for source in sources:
            real = Path(source).resolve()
            stat = real.stat()
            digest.update(f"\0{real}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
        for module in code:
            digest.update(Path(module).read_bytes())
    except OSError:
        return None
    return root / kind / digest.hexdigest()[:24]


def read_cached(folder: Path | None, name: str, read: Callable[[Path], _T]) -> _T | None:
    """`read(folder / name)` when that file exists and reads; None otherwise (the caller converts afresh)."""
    if folder is None or not (folder / name).is_file():
        return None
    try:
        return read(folder / name)
    except Exception as exc:  # noqa: BLE001 - a damaged cache is ignored, never fatal
        _warn(f"ignoring unreadable {folder / name}: {exc}")
        return None


def write_cached(folder: Path | None, name: str, write: Callable[[Path], None]) -> None:
    """Have `write(path)` fill a temporary file, then rename it to `folder / name`; failures only warn."""
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
        os.close(fd)
        try:
            write(Path(temporary))
            os.chmod(temporary, 0o644)  # readable by a gateway running as another user (mkstemp makes it 0600)
            os.replace(temporary, folder / name)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    except OSError as exc:
        _warn(f"could not cache {name} in {folder}: {exc}")


_CONVERTERS = (
    "conversion_cache.py",
    "tiktoken_bpe.py",
    "tekken.py",
    "quicktok_vocab.py",
    "qwen_tokenizer.py",
    "kimi_tokenizer.py",
    "sentencepiece_tokenizer.py",
)
"""The modules that convert vocabularies: a change to any of them changes every tokenizer's cache key."""


@cache
def _converters_digest() -> bytes:
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in _CONVERTERS:
        digest.update(name.encode() + b"\0" + (here / name).read_bytes())
    return digest.digest()


def cache_key(sources: Iterable[Path], params: Iterable[str]) -> str:
    """The key of a tokenizer conversion: its source files' bytes, its parameters and the converters' code."""
    digest = hashlib.sha256(_converters_digest())
    for path in sources:
        digest.update(hashlib.sha256(Path(path).read_bytes()).digest())
    for param in params:
        digest.update(b"\0" + param.encode())
    return digest.hexdigest()


def cached_tokenizer(sources: Iterable[Path], params: Iterable[str], convert: Callable[[], Tokenizer]) -> Tokenizer:
    """The tokenizer `convert` builds from `sources` with `params`, read from the cache when it was built before."""
    root = cache_root()
    if root is None:
        return convert()
    folder, name = root / "tokenizers", f"{cache_key(sources, params)}.json"
    cached = read_cached(folder, name, lambda p: Tokenizer.from_file(str(p)))
    if cached is not None:
        return cached
    tokenizer = convert()
    write_cached(folder, name, lambda p: p.write_text(tokenizer.to_str(), encoding="utf-8"))
    return tokenizer


def _warn(message: str) -> None:
    print(f"[conversion cache] {message}", file=sys.stderr, flush=True)
