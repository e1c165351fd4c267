"""Converted GGUF checkpoints on disk, so that a second load skips the slow GGUF parse and dequantization.

Reading a GGUF file means walking every metadata field (the whole vocabulary and merge list, ~3 s of CPU for the
embedded model) and dequantizing every tensor (~4.5 s). Both results are kept beside each other in one folder per
GGUF file, under the cache root (`LLM_GATEWAY_CACHE_DIR`, else `$XDG_CACHE_HOME/llm-gateway`, else
`~/.cache/llm-gateway`; `LLM_GATEWAY_CACHE_DIR=off` turns the cache off): `checkpoint.json` + `tokenizer.json` (what
the gateway and the worker read), and `model.safetensors` (the worker's float32 weights, written only for models up
to WEIGHTS_LIMIT_BYTES, 1 GiB: a 7B model's float32 copy would be 28 GB). The folder is named after the file's resolved
path, size and modification time, so a changed file gets a new folder. Files are written under a temporary name and
renamed, so a reader never sees half a file; any failure to read or write the cache falls back to the GGUF itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

CACHE_ENV = "LLM_GATEWAY_CACHE_DIR"
WEIGHTS_LIMIT_BYTES = 1 << 30
"""The largest float32 weights file kept (the embedded model's is ~540 MB)."""

_FORMAT = 1  # bump when what is written changes meaning
_T = TypeVar("_T")


def cache_root() -> Path | None:
    """Where converted checkpoints live; None when the cache is turned off."""
    told = os.environ.get(CACHE_ENV)
    if told is not None:
        return None if told.strip().lower() in ("", "off", "0", "false", "none") else Path(told)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-gateway"


def converted_dir(gguf: Path) -> Path | None:
    """The cache folder for this GGUF file (it may not exist yet); None when the cache is off or the file is gone."""
    root = cache_root()
    if root is None:
        return None
    try:
        real = gguf.resolve()
        stat = real.stat()
    except OSError:
        return None
    key = hashlib.sha256(f"{_FORMAT}\0{real}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:24]
    return root / "gguf" / f"{real.stem}-{key}"


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
            os.replace(temporary, folder / name)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    except OSError as exc:
        _warn(f"could not cache {name} in {folder}: {exc}")


def write_json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=1))


def _warn(message: str) -> None:
    print(f"[checkpoint cache] {message}", file=sys.stderr, flush=True)
