"""Suite-wide: how pytest-xdist shares the tests between its two processes, and one TLS context for every httpx
client the tests make."""

from __future__ import annotations

import functools
import ssl

import httpx._transports.default as httpx_transports
from xdist.scheduler import LoadFileScheduling

SHARED_SCOPES = ("tests/e2e/",)
"""Folders whose files share a session fixture that is costly to start (tests/e2e: one `gateway serve` with its
model): all their files go to one process, so the fixture starts once."""


class _FilesAndSharedFolders(LoadFileScheduling):
    """`--dist loadfile`, except that each folder of SHARED_SCOPES is one unit."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return next((folder for folder in SHARED_SCOPES if path.startswith(folder)), path)


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "loadfile":
        return _FilesAndSharedFolders(config, log)
    return None


_create_ssl_context = httpx_transports.create_ssl_context


@functools.cache
def _default_ssl_context(trust_env: bool) -> ssl.SSLContext:
    return _create_ssl_context(verify=True, trust_env=trust_env)


def _ssl_context(verify: object = True, cert: object = None, trust_env: bool = True) -> ssl.SSLContext:
    """httpx's TLS context for a new client, built once for the default settings: httpx builds one for every client
    (plain-HTTP ones and each `httpx.get()` too), and loading the CA bundle costs ~25 ms of CPU; the tests make
    thousands of clients, in polls above all."""
    if verify is True and cert is None:
        return _default_ssl_context(trust_env)
    return _create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)


httpx_transports.create_ssl_context = _ssl_context
