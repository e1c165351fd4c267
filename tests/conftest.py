"""Suite-wide: how pytest-xdist shares the tests between its two processes."""

from __future__ import annotations

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
