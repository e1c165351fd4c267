"""Conversions kept on disk: a GGUF's parsed metadata and float32 weights, tokenizers converted from vocabulary files.

Reading a GGUF file means walking every metadata field (the whole vocabulary and merge list, ~3 s of CPU for the
embedded model) and dequantizing every tensor (~4.5 s); building a `tokenizers` BPE from tiktoken ranks, a tekken or
a SentencePiece file takes 2-5 s. Each result is kept under the cache root (`LLM_GATEWAY_CACHE_DIR`, else
`$XDG_CACHE_HOME/llm-gateway`, else `~/.cache/llm-gateway`; `LLM_GATEWAY_CACHE_DIR=off` turns the cache off), in an
entry folder `KIND/KEY` (KIND `gguf` or `tokenizers`) whose KEY hashes what it depends on: a GGUF's resolved path,
size and modification time (a tokenizer: its source files' bytes), the conversion's parameters, and the source code
of the modules that convert. A changed file, parameter or converter gets a new entry, never a stale result. Files are
written under a temporary name and renamed, so a reader never sees half a file; a damaged or unwritable cache only
warns, and the conversion runs.

Eviction: after each write, the least recently used entries (by the entry folder's mtime, which every read renews)
are removed until the entries total at most `LLM_GATEWAY_CACHE_MAX_BYTES` (default 4 GiB); so entries of old file or
converter versions, never read again, go first. Processes share the cache safely: a reader or writer holds a shared
`flock` on the entry folder while it loads or writes, and eviction takes an exclusive one without waiting, skipping
an entry in use; it renames the entry away (one atomic step: a later reader finds nothing and converts) before
deleting it. A reader that opened the folder just before that sees it gone once it holds its lock, and converts.
What a finished load still maps (the weights' safetensors) stays readable after the file is removed, as POSIX keeps
it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from functools import cache
from pathlib import Path
from typing import TypeVar

from tokenizers import Tokenizer

CACHE_ENV = "LLM_GATEWAY_CACHE_DIR"
MAX_BYTES_ENV = "LLM_GATEWAY_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 4 << 30
KINDS = ("gguf", "tokenizers")
"""The cache root's folders of entries (the root may hold other things: they are never evicted)."""

_TRASH = ".evicted-"
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
    """`read(folder / name)` when that file exists and reads; None otherwise (the caller converts afresh). The entry
    `folder` is locked against eviction while `read` runs, and its use renewed."""
    if folder is None or not (folder / name).is_file():
        return None
    try:
        with _entry_lock(folder) as present:
            if not present:
                return None
            _renew(folder)
            return read(folder / name)
    except Exception as exc:  # noqa: BLE001 - a damaged cache is ignored, never fatal
        _warn(f"ignoring unreadable {folder / name}: {exc}")
        return None


def write_cached(folder: Path | None, name: str, write: Callable[[Path], None]) -> None:
    """Have `write(path)` fill a temporary file, then rename it to `folder / name`; failures only warn. Then evict
    what the cache holds beyond its size (never `folder`)."""
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with _entry_lock(folder) as present:
            if not present:
                raise OSError("the folder was evicted while it was being written")
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
        return
    root = cache_root()
    if root is not None and folder.parent.parent == root and folder.parent.name in KINDS:
        evict(root, keep=folder)


def max_bytes() -> int:
    """How many bytes the cache's entries may take (`LLM_GATEWAY_CACHE_MAX_BYTES`, else 4 GiB)."""
    told = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not told:
        return DEFAULT_MAX_BYTES
    try:
        return max(0, int(told))
    except ValueError:
        _warn(f"{MAX_BYTES_ENV}={told!r} is not a whole number of bytes; using {DEFAULT_MAX_BYTES}")
        return DEFAULT_MAX_BYTES


def evict(root: Path, keep: Path | None = None) -> None:
    """Remove the least recently used entries under `root` until they total at most `max_bytes()`; an entry another
    process is reading or writing, and `keep`, stay. Leftovers of an interrupted eviction are removed."""
    entries: list[tuple[float, int, Path]] = []
    for kind in KINDS:
        try:
            children = list(os.scandir(root / kind))
        except OSError:
            continue
        for child in children:
            path = Path(child.path)
            if child.name.startswith(_TRASH):
                _delete(path)
            elif not child.name.startswith("."):  # dot names: an older version's files being written
                try:
                    entries.append((child.stat().st_mtime, _size(path), path))
                except OSError:
                    continue  # removed meanwhile
    total, limit = sum(size for _, size, _ in entries), max_bytes()
    for _, size, path in sorted(entries):
        if total <= limit:
            return
        if path != keep and _remove_unused(path):
            total -= size


def _size(entry: Path) -> int:
    if not entry.is_dir():
        return entry.stat().st_size
    return sum(f.stat().st_size for f in os.scandir(entry) if f.is_file(follow_symlinks=False))


@contextmanager
def _entry_lock(entry: Path) -> Iterator[bool]:
    """A shared lock on `entry` (eviction waits for none, it skips a locked entry); yields whether the entry is still
    the one at its path once locked (False: it was evicted meanwhile)."""
    try:
        fd = os.open(entry, os.O_RDONLY)
    except FileNotFoundError:
        yield False
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield _still_there(entry, fd)
    finally:
        os.close(fd)


def _remove_unused(entry: Path) -> bool:
    """Remove `entry` unless another process holds it (True when removed)."""
    try:
        fd = os.open(entry, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not _still_there(entry, fd):
            return False
        trash = entry.with_name(f"{_TRASH}{entry.name}.{os.getpid()}")
        os.rename(entry, trash)  # from here no reader finds it
    except OSError:  # locked by a reader or writer (BlockingIOError), or gone
        return False
    finally:
        os.close(fd)
    _delete(trash)
    return True


def _still_there(entry: Path, fd: int) -> bool:
    try:
        here, held = os.stat(entry), os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)


def _renew(entry: Path) -> None:
    """Mark `entry` used now (its mtime orders eviction); a read-only cache stays as it is."""
    with suppress(OSError):
        os.utime(entry)


def _delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


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
    folder, name = root / "tokenizers" / cache_key(sources, params)[:24], "tokenizer.json"
    cached = read_cached(folder, name, lambda p: Tokenizer.from_file(str(p)))
    if cached is not None:
        return cached
    tokenizer = convert()
    write_cached(folder, name, lambda p: p.write_text(tokenizer.to_str(), encoding="utf-8"))
    return tokenizer


def _warn(message: str) -> None:
    print(f"[conversion cache] {message}", file=sys.stderr, flush=True)
