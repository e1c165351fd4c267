"""What a reload reuses of the last one: each policy file's parsed YAML (kept while the file's stat, or else its
content's hash, is unchanged) and each tenant's Policy (kept while its file and `_defaults.yaml` are unchanged). Parsing
is ~1 ms of CPU per file and holds the GIL: re-parsing every file at each change slowed every stream for as long."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from policies.loader import (
    MAX_FILE_BYTES,
    KnownValid,
    Marked,
    PolicyError,
    PolicyFileError,
    checked_defaults,
    derive_policy,
    parse_marked,
)
from policies.policy import Policy

RECENT_NS = 2_000_000_000
"""A file whose ctime or mtime was less than this old when it was read may be written again within the same timestamp
tick (a file system's clock is coarse: a kernel tick, whole seconds on some), its stat unchanged: until it has been read
that long after its last change, its stat does not vouch for its content, which is read and hashed at each reload."""


@dataclass(frozen=True)
class Stamp:
    """What any change of a file's content changes (ctime too: `touch -r` or a copy that keeps mtimes cannot set it)."""

    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    dev: int

    @classmethod
    def of(cls, st: os.stat_result) -> Stamp:
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


@dataclass(frozen=True)
class Read:
    """One file as last read: its stamp, whether that stamp alone vouches for the content, the content and its hash,
    and the document parsed from it (without the lines of its fields: they were half its memory, 4 KB a tenant) or
    every problem."""

    name: str
    stamp: Stamp
    settled: bool
    data: bytes
    digest: bytes
    doc: Marked | None
    errors: tuple[PolicyError, ...]

    def marked(self) -> Marked:
        """The document with the line of each field, parsed again."""
        return parse_marked(self.name, self.data)


Derived = Policy | tuple[PolicyError, ...]
"""A tenant file with the defaults: its Policy, or every problem."""


def _defaults(name: str, data: bytes) -> Marked:
    return checked_defaults(name, parse_marked(name, data))


def _derive(name: str, own: Read, defaults: Read | None, known: KnownValid) -> Derived:
    try:
        return derive_policy(name, own.doc, defaults.doc if defaults is not None else None, known)
    except PolicyFileError:
        pass  # said again below, each problem at its line
    try:
        return derive_policy(name, own.marked(), defaults.marked() if defaults is not None else None, known)
    except PolicyFileError as exc:
        return tuple(exc.errors)


class ParsedFiles:
    """One reload's files, reusing what `last` (the previous reload's, or None) read and derived; `verify`: compare
    every file's content to its last version whatever its stat says (SIGHUP: an operator asks for a full re-read);
    `held`: each file's stamp by name when the watcher found the directory still (`moving` once a file is read with
    another one, or `_defaults.yaml` is gone since)."""

    def __init__(self, last: ParsedFiles | None = None, verify: bool = False, held: Mapping[str, Stamp] | None = None):
        self._held = held
        self.moving = False
        """Whether a file changed since the watcher's look (its content then not read: no doc, no problem)."""
        self._last_reads = last._reads if last is not None else {}
        self._last_derived = last._derived if last is not None else {}
        self._verify = verify
        self._reads: dict[str, Read] = {}
        self._derived: dict[str, tuple[tuple[bytes, bytes | None], Derived]] = {}
        self._last_valid = last._valid if last is not None else {}
        self._valid: dict[bytes, int] = {}
        """Per content (its digest): the fields found valid under the schema (`KnownValid`), whose check is skipped."""
        self.parsed: list[str] = []
        """The files whose YAML this reload parsed."""
        self.derived: list[str] = []
        """The tenant files this reload checked and built a Policy of (theirs or the defaults' content changed)."""

    @property
    def reused(self) -> int:
        """The files this reload read whose parsed YAML it took from the last one (unchanged stat or content)."""
        return len(self._reads) - len(self.parsed)

    def defaults(self, path: Path) -> Read | None:
        """`_defaults.yaml` at `path` (its `errors` say why it does not load), or None where there is none (`moving`
        when the watcher's look saw one: removed since, maybe to be written again)."""
        if path.is_file():
            return self._read(path, _defaults)
        self.moving = self._held is not None and path.name in self._held
        return None

    def policy(self, path: Path, defaults: Read | None) -> Derived:
        """The tenant file at `path` with `defaults` (which loaded): the last reload's result while neither changed."""
        own = self._read(path, parse_marked)
        if own.doc is None:
            return own.errors
        name = str(path)
        key = (own.digest, defaults.digest if defaults is not None else None)
        last = self._last_derived.get(name)
        known = KnownValid(self._valid_of(own), self._valid_of(defaults) if defaults is not None else 0)
        if last is not None and last[0] == key:
            result = last[1]
        else:
            self.derived.append(name)
            result = _derive(name, own, defaults, known)
            self._valid[own.digest] = known.own
            if defaults is not None:
                self._valid[defaults.digest] = known.defaults
        self._derived[name] = (key, result)
        return result

    def tenant(self, path: Path) -> str | None:
        """The `tenant` the file at `path` names as this reload read it (it may not load), or None."""
        read = self._reads.get(str(path))
        value = read.doc.value if read is not None and read.doc is not None else None
        tenant = value.get("tenant") if isinstance(value, dict) else None
        return tenant if isinstance(tenant, str) else None

    def _valid_of(self, read: Read) -> int:
        """The fields of `read`'s content found valid so far (kept while a file holds that content)."""
        found = self._valid.get(read.digest)
        if found is None:
            found = self._valid[read.digest] = self._last_valid.get(read.digest, 0)
        return found

    def _as_held(self, path: Path) -> bool:
        """Whether `path`, just read, is still as the watcher's look found it (stat as the look stats: followed links,
        whatever an overlay file system's fstat says)."""
        try:
            return Stamp.of(os.stat(path)) == self._held.get(path.name)
        except OSError:
            return False

    def _read(self, path: Path, parse: Callable[[str, bytes], Marked]) -> Read:
        name = str(path)
        last = self._last_reads.get(name)
        if last is not None and last.settled and not self._verify:
            try:
                unchanged = Stamp.of(os.stat(path)) == last.stamp
            except OSError:
                unchanged = False
            if unchanged:
                self._reads[name] = last
                return last
        read_at = time.time_ns()
        try:
            with path.open("rb") as f:
                stamp = Stamp.of(os.fstat(f.fileno()))  # the file read, even if its name points elsewhere by now
                data = f.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            error = PolicyError(name, None, None, f"cannot be read: {exc}")
            return Read(name, Stamp(0, 0, 0, 0, 0), False, b"", b"", None, (error,))
        if self._held is not None and not self._as_held(path):  # written since the look, or meanwhile: maybe half
            self.moving = True
            return Read(name, stamp, False, b"", b"", None, ())
        settled = max(stamp.ctime_ns, stamp.mtime_ns) < read_at - RECENT_NS
        digest = hashlib.blake2b(data, digest_size=16).digest()
        if last is not None and last.digest == digest:
            read = Read(name, stamp, settled, last.data, digest, last.doc, last.errors)
        else:
            self.parsed.append(name)
            try:
                doc, errors = Marked(parse(name, data).value, {}), ()
            except PolicyFileError as exc:
                doc, errors = None, tuple(exc.errors)
            read = Read(name, stamp, settled, data, digest, doc, errors)
        self._reads[name] = read
        return read
