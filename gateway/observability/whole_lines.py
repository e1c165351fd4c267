"""Log lines written whole: one write(2) per line, so the processes of a group (`--workers N`) sharing stderr, stdout
or a file never interleave their lines, however long.

- A regular file (`--audit-log`, opened O_APPEND; or stderr / stdout redirected to a file): one write(2) of the line.
  Linux appends each write whole on a local filesystem (the inode stays locked for the write), and processes
  writing through one inherited descriptor never overlap (the file position is locked per write).
- A pipe, socket or terminal (a container's stdout and stderr, journald's stream): POSIX makes a write of at most
  PIPE_BUF bytes (4096 on Linux) atomic; a longer one may be split where the pipe fills, and another writer's bytes
  land in between. A longer line is therefore written under the group's lock (flock on a file in its private
  directory): the group's processes take turns for those lines, shorter ones need no turn. A process outside the
  group writing to the same pipe is not held by that lock.
- A stream without a descriptor (a test's capture): written to it and flushed, as logging would.

Python's buffered streams happen to make one write(2) of a line flushed at once too, but not after a partial write
(a pipe, a signal), and they give no turn to lines past PIPE_BUF: this writes the bytes itself.

A pipe, socket or terminal nobody reads (a log shipper that stopped) would block a write, and with it the event loop
that writes access and audit lines: every request. So on those, a write waits for room BLOCKED_AFTER_S at most; past
that the stream counts as blocked and its lines are dropped (`dropped`, no wait) until it has room again, when a line
`{"dropped_lines": N, ...}` says how many went (after a newline ending a line cut short, if one was). A line past
PIPE_BUF goes in PIPE_BUF pieces, each once there is room.
"""

from __future__ import annotations

import fcntl
import io
import os
import select
import stat
import threading
from pathlib import Path
from typing import IO, Any

PIPE_BUF = select.PIPE_BUF
"""The longest write(2) POSIX keeps whole on a pipe."""
BLOCKED_AFTER_S = 1.0
"""How long a write waits for room on a pipe, socket or terminal before its lines are dropped instead."""


class WholeLines:
    """Writes each line (bytes ending in a newline) to `stream` with one write(2); past PIPE_BUF on a pipe, socket
    or terminal, under an exclusive flock of `lock` (a path every process of the group shares) when given."""

    def __init__(self, stream: IO[Any], lock: Path | None = None, *, owned: bool = False) -> None:
        self._stream = stream
        self._owned = owned
        try:
            self._fd: int | None = stream.fileno()
            shared = not stat.S_ISREG(os.fstat(self._fd).st_mode)
        except (OSError, ValueError, io.UnsupportedOperation):
            self._fd, shared = None, False
        else:
            stream.flush()  # what it buffered goes out before the lines written past it
        self._lock_path = lock if shared else None
        self._lock_fd: int | None = None
        self._thread_lock = threading.Lock()
        self._room: select.poll | None = None
        if shared and self._fd is not None:
            self._room = select.poll()
            self._room.register(self._fd, select.POLLOUT)
        self._blocked = False
        self._cut = False
        self._dropped_before = 0
        self.dropped = 0
        """Lines dropped because the stream had no room for BLOCKED_AFTER_S (a pipe nobody reads)."""

    @classmethod
    def append_to(cls, path: Path) -> WholeLines:
        """`path` opened for appending (O_APPEND, created if absent), unbuffered: each line one write(2) at its end."""
        return cls(open(path, "ab", buffering=0), owned=True)

    def write(self, line: bytes) -> None:
        """Write `line` whole; OSError when the descriptor fails (a closed pipe, a full disk)."""
        if self._fd is None:
            text = isinstance(self._stream, io.TextIOBase)
            self._stream.write(line.decode("utf-8", "backslashreplace") if text else line)
            self._stream.flush()
            return
        thread_lock = self._thread_lock
        thread_lock.acquire()  # not `with`: a third of the cost of a line written to a file
        try:
            if self._lock_path is not None and len(line) > PIPE_BUF and (lock := self._group_lock()) is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    self._write_all(line)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
            else:
                self._write_all(line)
        finally:
            thread_lock.release()

    def _write_all(self, line: bytes) -> None:
        assert self._fd is not None
        if self._room is not None:
            self._write_when_there_is_room(line)
            return
        written = os.write(self._fd, line)
        if written < len(line):  # cut short (a pipe interrupted by a signal): the rest, as often as it takes
            view = memoryview(line)[written:]
            while view:
                view = view[os.write(self._fd, view) :]

    def _write_when_there_is_room(self, line: bytes) -> None:
        """Each PIPE_BUF piece once the stream has room (a write that small then never blocks); the line dropped
        when it has none for BLOCKED_AFTER_S (none at all once blocked), and the drops said once it has room."""
        assert self._fd is not None
        if not self._has_room():
            self._drop()
            return
        if self._blocked:
            self._blocked = False
            dropped = self.dropped - self._dropped_before
            note = b'{"dropped_lines": %d, "why": "the stream had no room (nobody read it)"}\n' % dropped
            line = (b"\n" if self._cut else b"") + note + line
            self._cut = False
        written = os.write(self._fd, line[:PIPE_BUF])  # a line up to PIPE_BUF long is not copied
        if written == len(line):  # the usual line: one write, whole
            return
        view = memoryview(line)[written:]
        while view:
            if not self._has_room():
                self._cut = True
                self._drop()
                return
            view = view[os.write(self._fd, view[:PIPE_BUF]) :]

    def _has_room(self) -> bool:
        assert self._room is not None
        return bool(self._room.poll(0 if self._blocked else BLOCKED_AFTER_S * 1000))

    def _drop(self) -> None:
        if not self._blocked:
            self._blocked, self._dropped_before = True, self.dropped
        self.dropped += 1

    def _group_lock(self) -> int | None:
        """The lock file's descriptor (opened once); None when it cannot be (the group's directory is gone)."""
        if self._lock_fd is None and self._lock_path is not None:
            try:
                self._lock_fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                self._lock_path = None
        return self._lock_fd

    def close(self) -> None:
        """Close the file `append_to` opened and the lock file."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._owned:
            self._stream.close()
