"""What a Router tells whoever watches it (the gateway's metrics): attempts, retries, failures.

Defined here so that backends never import the gateway; the default observer ignores everything.
Gauges (outstanding requests, health, breaker state) need no events: read them from `Router.replicas`.
"""

from __future__ import annotations

from backends.base import BackendError


class RouterObserver:
    """Hooks a Router calls on its hot path: keep them cheap and never raise."""

    def dispatched(self, replica: str) -> None:
        """An attempt of a request is about to be sent to `replica`."""

    def retried(self, replica: str, error: BackendError) -> None:
        """An attempt on `replica` failed with `error` before any output and another replica takes the request."""

    def failed(self, replica: str, error: BackendError) -> None:
        """An attempt on `replica` ended with `error` (retried or not)."""
