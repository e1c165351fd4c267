"""TCP socket states read from /proc/net/tcp, and a bounded wait: the tests that no connection is left dead."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator


def _rows() -> Iterator[tuple[int, int, str]]:
    """This machine's TCP sockets: local port, remote port, state (hex, as /proc/net/tcp writes it)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in list(f)[1:]:
                fields = row.split()
                yield int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16), fields[3]


def tcp_sockets(port: int, state: str, *, local: bool = False) -> int:
    """This machine's TCP sockets in `state` (hex, as /proc/net/tcp writes it) whose remote (or local) port is `port`."""
    return sum(1 for own, remote, s in _rows() if (own if local else remote) == port and s == state)


def connections_to(port: int, *states: str) -> set[int]:
    """The local ports of this machine's TCP sockets to `port` in any of `states`: the same connections can be
    looked for again after a fault, whatever other connections opened meanwhile."""
    return {own for own, remote, state in _rows() if remote == port and state in states}


def close_wait_sockets(port: int) -> int:
    """This machine's TCP sockets to `port` in CLOSE-WAIT (the peer closed, we did not)."""
    return tcp_sockets(port, CLOSE_WAIT)


ESTABLISHED, CLOSE_WAIT = "01", "08"


async def eventually(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Whether `condition` holds within `seconds` (a bounded wait, not a timing)."""
    for _ in range(int(seconds / 0.02)):
        if condition():
            return True
        await asyncio.sleep(0.02)
    return condition()
