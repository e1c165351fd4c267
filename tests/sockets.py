"""TCP socket states read from /proc/net/tcp, and a bounded wait: the tests that no connection is left dead."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


def tcp_sockets(port: int, state: str, *, local: bool = False) -> int:
    """This machine's TCP sockets in `state` (hex, as /proc/net/tcp writes it) whose remote (or local) port is `port`."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in list(f)[1:]:
                fields = row.split()
                if int(fields[1 if local else 2].rsplit(":", 1)[1], 16) == port and fields[3] == state:
                    count += 1
    return count


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
