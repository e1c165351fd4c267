"""Converted tokenizers cached on disk: a rank or model file converts once per machine, not once per process.

Converting a vocabulary file into a `tokenizers.Tokenizer` (merges, JSON, parse) costs seconds for the large
ones (o200k, Llama 3, tekken, Qwen); reading the converted `tokenizer.json` back costs about a third of that.
The cache key is the SHA-256 of the source files' bytes, the conversion's parameters and the source of every
converter module in `backends/`, so a changed vocabulary or converter never reads a stale file. Files go to
`$LLM_GATEWAY_CACHE` (else `$XDG_CACHE_HOME/llm-gateway`, else `~/.cache/llm-gateway`) under `tokenizers/`,
written atomically; `LLM_GATEWAY_CACHE=off`, or a folder that cannot be written (a read-only container), only
converts.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path

from tokenizers import Tokenizer

_CONVERTERS = (
    "cached_tokenizer.py",
    "tiktoken_bpe.py",
    "tekken.py",
    "quicktok_vocab.py",
    "qwen_tokenizer.py",
    "kimi_tokenizer.py",
    "sentencepiece_tokenizer.py",
)
OFF = "off"


def cache_dir() -> Path | None:
    """Where converted tokenizers are kept, or None when caching is off."""
    configured = os.environ.get("LLM_GATEWAY_CACHE")
    if configured == OFF:
        return None
    if configured:
        return Path(configured) / "tokenizers"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "llm-gateway" / "tokenizers"


@cache
def _converters_digest() -> bytes:
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in _CONVERTERS:
        digest.update(name.encode() + b"\0" + (here / name).read_bytes())
    return digest.digest()


def cache_key(sources: Iterable[Path], params: Iterable[str]) -> str:
    """The key of a conversion: its source files' bytes, its parameters and the converters' code."""
    digest = hashlib.sha256(_converters_digest())
    for path in sources:
        digest.update(hashlib.sha256(Path(path).read_bytes()).digest())
    for param in params:
        digest.update(b"\0" + param.encode())
    return digest.hexdigest()


def cached_tokenizer(sources: Iterable[Path], params: Iterable[str], convert: Callable[[], Tokenizer]) -> Tokenizer:
    """The tokenizer `convert` builds from `sources` with `params`, read from the cache when it was built before."""
    folder = cache_dir()
    if folder is None:
        return convert()
    path = folder / f"{cache_key(sources, params)}.json"
    if path.is_file():
        try:
            return Tokenizer.from_file(str(path))
        except Exception:  # noqa: BLE001 - a truncated or foreign file: convert again and replace it
            path.unlink(missing_ok=True)
    tokenizer = convert()
    temporary: str | None = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(tokenizer.to_str())
        os.chmod(temporary, 0o644)  # readable by a gateway running as another user (mkstemp makes it 0600)
        os.replace(temporary, path)
    except OSError:  # a read-only or full disk: the conversion still stands
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
    return tokenizer
