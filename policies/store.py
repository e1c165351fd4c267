"""The policies in force: loaded from a directory, reloaded in place (a broken file keeps its tenant's
last good version), and looked up by key hash."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from policies.loader import DEFAULTS_FILE, PolicyError, conflicts, policy_files
from policies.parsed import ParsedFiles, Stamp
from policies.policy import Key, Policy

log = logging.getLogger(__name__)


class PolicyStore:
    """The tenants of one policy directory. `reload()` swaps in a new key index at once: a request
    keeps the Policy object it was admitted under, so requests in flight are not affected. One reload at a time,
    on any thread (the watcher's run in a worker thread); lookups may run meanwhile."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._files: dict[str, Policy] = {}
        self._by_hash: dict[str, tuple[Policy, Key]] = {}
        self.errors: list[PolicyError] = []
        """The problems of the last reload (files rejected, their last good version kept)."""
        self.reloads = 0
        self.parsed_files: ParsedFiles | None = None
        """What the last reload read and derived, which the next reuses where its files did not change."""
        self.last_read: ParsedFiles | None = None
        """What the last reload read, applied or not (broken defaults keep every policy: nothing is applied)."""

    def reload(self, verify: bool = False, held: Mapping[str, Stamp] | None = None) -> list[PolicyError]:
        """Read the directory again; apply every good file, keep the last good version of a broken one,
        drop removed files. Only files changed since the last reload are parsed again (all of them checked again when
        `_defaults.yaml` changed); `verify` compares every file's content, not only its stat. `held`: each file's stamp
        when the watcher found the directory still; a file whose stamp differs as it is read (being written again: its
        half may parse), or removed since, makes this reload apply nothing: every policy stays as it is until a reload
        whose files are all as its look found them. Returns (and logs) the problems."""
        errors: list[PolicyError] = []
        parsed = self.last_read = ParsedFiles(self.parsed_files, verify, held)
        try:
            defaults = parsed.defaults(self.directory / DEFAULTS_FILE)
            paths = policy_files(self.directory)
        except OSError as exc:
            return self._report([PolicyError(str(self.directory), None, None, f"cannot be read: {exc}")])
        if parsed.moving:  # the defaults changed since the look: every tenant depends on them, keep everything
            return self.errors
        if defaults is not None and defaults.errors:
            return self._report(list(defaults.errors))
        files: dict[str, Policy] = {}
        changed: list[str] = []
        listed = {str(path) for path in paths}
        for path in paths:
            name = str(path)
            result = parsed.policy(path, defaults)
            if not isinstance(result, Policy):
                errors += result
                last_good = name if name in self._files else self._renamed(parsed.tenant(path), listed)
                if last_good is not None:
                    files[last_good] = self._files[last_good]
                continue
            files[name] = result
            last = self._files.get(name)
            if result is not last and result != last:
                changed.append(name)
        if parsed.moving or held is not None and any(n not in listed and Path(n).name in held for n in self._files):
            return self.errors  # changed since the look (a write, a rename, an rm before a write): the next reload's
        reverted: set[str] = set()
        while True:  # last good versions (which held together) claim first; a new version that clashes is rejected
            kept = [f for f in sorted(files) if f not in changed or f in reverted]
            clashes = conflicts(files, kept + [f for f in changed if f in files and f not in reverted])
            if not clashes:
                break
            for name, error in clashes.items():
                errors.append(error)
                if name in self._files and name not in reverted:
                    files[name] = self._files[name]  # back to its last good version, which claims first next time
                    reverted.add(name)
                else:
                    del files[name]
        self._files = files
        self._by_hash = {k.sha256: (p, k) for p in files.values() for k in p.keys}
        self.parsed_files = parsed
        self.reloads += 1
        return self._report(errors)

    def _renamed(self, tenant: str | None, listed: set[str]) -> str | None:
        """The file of `tenant`'s last good version when that file is gone (renamed to one that does not load now:
        with defaults it fails, say), or None."""
        gone = (name for name, policy in self._files.items() if policy.tenant == tenant and name not in listed)
        return next(gone, None) if tenant is not None else None

    def _report(self, errors: list[PolicyError]) -> list[PolicyError]:
        for error in errors:
            log.error("policy rejected (the last good version stays): %s", error)
        self.errors = errors
        return errors

    def lookup(self, key_sha256: str) -> tuple[Policy, Key] | None:
        """The tenant and key whose hash is `key_sha256` (lower-case hex)."""
        return self._by_hash.get(key_sha256)

    @property
    def tenants(self) -> dict[str, Policy]:
        return {p.tenant: p for p in self._files.values()}
