"""Where a model's replicas are: a static list of URLs, or a DNS name resolved again and again.

A Kubernetes headless service resolves to one address per ready pod; resolving it periodically
follows scale-ups, scale-downs and restarts without a gateway restart.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""(host, port) → the addresses it resolves to now."""


async def resolve_addresses(host: str, port: int) -> list[str]:
    """Every TCP address of `host`, in the order the resolver gave them, each once."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


@dataclass(frozen=True)
class DNSService:
    """Replicas behind a DNS name: one per address, all on `port`."""

    host: str
    port: int
    scheme: str = "http"
    refresh_s: float = 10.0

    async def urls(self, resolve: Resolver = resolve_addresses) -> list[str] | None:
        """The replica URLs this name resolves to now; None when the lookup fails (keep what you have)."""
        try:
            addresses = await resolve(self.host, self.port)
        except OSError as e:
            log.warning("DNS lookup of %s failed: %r", self.host, e)
            return None
        return [f"{self.scheme}://{_host_part(a)}:{self.port}" for a in addresses]


def _host_part(address: str) -> str:
    try:
        return f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    except ValueError:
        return address
