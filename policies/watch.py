"""Hot reload: poll a policy directory (names and each file's `Stamp`, and the `..data` link a Kubernetes
ConfigMap or Secret mount swaps atomically) and reload the store once a change has held still for a whole poll (a
file written in place is read whole, never empty or half-written); SIGHUP reloads at once."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Mapping
from pathlib import Path

from policies.parsed import Stamp
from policies.store import PolicyStore

log = logging.getLogger(__name__)

POLL_S = 0.25


def snapshot(directory: Path) -> tuple:
    """What a change of any policy file changes: each one's `Stamp`, the one a reload trusts (its ctime too: a rewrite
    that keeps size and mtime, `touch -r`, would be read by a reload but trigger none)."""
    entries = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                try:
                    st = entry.stat()  # follows links: a ConfigMap's files are links into ..data
                except OSError:
                    continue
                entries.append((entry.name, Stamp.of(st)))
        data = os.path.realpath(directory / "..data") if (directory / "..data").exists() else None
    except OSError:
        return ("unreadable",)
    return (data, tuple(sorted(entries)))


def stamps(state: tuple) -> dict[str, Stamp] | None:
    """Each file's `Stamp` in a `snapshot`; None for a directory that could not be read."""
    return dict(state[1]) if len(state) == 2 else None


class PolicyWatcher:
    """Runs as a background task of the app: `run()` polls until cancelled."""

    def __init__(self, store: PolicyStore, poll_s: float = POLL_S, on_reload: Callable[[bool], None] | None = None):
        self.store = store
        self.poll_s = poll_s
        self.on_reload = on_reload
        """Told after each reload whether every file was accepted (metrics count reloads and failures)."""
        self._wake = asyncio.Event()
        self._loaded = self._seen = snapshot(store.directory)
        self._changing: tuple | None = None

    def due(self) -> bool:
        """Look at the directory: whether it changed since the last reload and has held still since the last look
        (a writer still at work changes it between two looks; a reload then would read its half-written file)."""
        now = self._seen = snapshot(self.store.directory)
        if now == self._loaded:
            self._changing = None
            return False
        held_still, self._changing = now == self._changing, now
        return held_still

    def request_reload(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        except (RuntimeError, ValueError):  # not the main thread (tests serving in a thread)
            pass
        try:
            while True:
                try:
                    await asyncio.wait_for(self._wake.wait(), self.poll_s)
                except TimeoutError:
                    pass
                forced = self._wake.is_set()
                self._wake.clear()
                if self.due() or forced:  # the state that held still is what counts as loaded: a later look could
                    # see a writer's first half, and a second half that leaves size and mtime alike would go unseen
                    self._loaded, self._changing = self._seen, None
                    await self._reload(verify=forced, held=stamps(self._loaded))
        finally:
            try:
                loop.remove_signal_handler(signal.SIGHUP)
            except (RuntimeError, ValueError):
                pass

    async def _reload(self, verify: bool, held: Mapping[str, Stamp] | None = None) -> None:
        """Reload the store off the event loop (~1 ms of CPU per file parsed: the changed ones; `verify`, SIGHUP's,
        reads every file to compare its content; `held`: the files as the look that found them still saw them, a file
        changed since being a writer at work, read at a later reload); a reload that fails itself (a loader bug) keeps
        every policy and the watcher going, logged and counted as a failure."""
        try:
            errors = await asyncio.to_thread(self.store.reload, verify, held)
        except Exception:
            log.exception("policy reload failed: every policy stays as it was")
            ok = False
        else:
            read = self.store.last_read
            log.warning(
                "policies reloaded from %s: %d tenants, %d problems, %d files parsed, %d reused",
                self.store.directory,
                len(self.store.tenants),
                len(errors),
                len(read.parsed) if read is not None else 0,
                read.reused if read is not None else 0,
            )
            ok = not errors
        if self.on_reload is not None:
            self.on_reload(ok)
