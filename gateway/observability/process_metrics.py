"""Metrics of a group of gateway processes (`gateway serve --workers N`): each process serves its own registry on
a private Unix socket, and /metrics in any of them merges all of them into one exposition.

Merging: counters, histograms and the additive gauges (requests running, waiting, per replica) are summed, as
if one process had counted everything; `_created` takes the earliest; a replica is healthy only if every process
finds it so, and its circuit breaker shows the worst state any process holds.

Merged counters never go down when a process dies and is restarted (Prometheus would read that as a reset: a
rate spike for the whole group). Each process's place in the group (its slot) keeps a counters file beside its
socket: every exposition the process gives out is first written there, so the file never holds less than anything
reported. A process that is not answering (dead, restarting) is merged from its file, counters and histograms only
(its gauges are gone with it); a restarted process starts from its predecessor's file and adds its own counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 2.0
_GAUGE_MERGE: dict[str, Callable[[Iterable[float]], float]] = {
    "gateway:backend_healthy": min,
    "gateway:backend_circuit_breaker_state": max,
}
"""Gauges that are one process's view of a shared thing, not a share of a total (the rest are summed)."""


def merge_expositions(texts: list[str]) -> bytes:
    """Prometheus text expositions of several processes → one, in the first one's order of families."""
    families: dict[str, Metric] = {}
    values: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            for sample in family.samples:
                key = (family.name, sample.name, tuple(sorted(sample.labels.items())))
                values.setdefault(key, []).append(sample.value)
    for (name, sample_name, labels), found in values.items():
        family = families[name]
        family.add_sample(sample_name, dict(labels), _combine(family, sample_name)(found))
    registry = CollectorRegistry()
    registry.register(_Fixed(list(families.values())))
    return generate_latest(registry)


def counters_only(text: str) -> str:
    """An exposition's counters and histograms (with their `_created` series), without its gauges."""
    kept = [
        family
        for family in text_string_to_metric_families(text)
        if family.type in ("counter", "histogram") or family.name.endswith("_created")
    ]
    registry = CollectorRegistry()
    registry.register(_Fixed(kept))
    return generate_latest(registry).decode()


def _counters_path(socket: Path) -> Path:
    """The counters file of the process whose metrics socket is `socket`."""
    return socket.with_suffix(".counters")


def _combine(family: Metric, sample_name: str) -> Callable[[Iterable[float]], float]:
    if sample_name.endswith("_created"):
        return min
    if family.type == "gauge":
        return _GAUGE_MERGE.get(family.name, sum)
    return sum


class _Fixed(Collector):
    """Collects the given metric families as they are."""

    def __init__(self, families: list[Metric]):
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class ProcessGroupMetrics:
    """This process's place in a group: its own socket, its siblings' sockets, and the merged exposition."""

    def __init__(self, render: Callable[[], bytes], own: Path, siblings: list[Path]):
        self._render = render
        self._own = own
        self._siblings = siblings
        self._counters = _counters_path(own)
        self._predecessors = counters_only(self._counters.read_text()) if self._counters.exists() else None
        """What the processes that held this slot before this one counted."""

    def _exposition(self) -> str:
        """This slot's exposition (the predecessors' counts plus this process's), written to its counters file first."""
        text = self._render().decode()
        if self._predecessors is not None:
            text = merge_expositions([text, self._predecessors]).decode()
        partial = self._counters.with_suffix(".partial")
        try:
            partial.write_text(text)
            os.replace(partial, self._counters)
        except OSError as e:
            log.warning("metrics counters file %s not written: %r", self._counters, e)
        return text

    async def serve(self) -> None:
        """Until cancelled: answer every connection on the own socket with this process's exposition."""
        with contextlib.suppress(FileNotFoundError):
            self._own.unlink()  # left by this process's predecessor
        server = await asyncio.start_unix_server(self._answer, path=str(self._own))
        async with server:
            await server.serve_forever()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(self._exposition().encode())
        with contextlib.suppress(OSError):
            await writer.drain()
        writer.close()

    async def render(self) -> bytes:
        """Every process's metrics merged (a sibling that does not answer in time counts with its counters file)."""
        texts = await asyncio.gather(*(_scrape(path) for path in self._siblings))
        return merge_expositions([self._exposition(), *(t for t in texts if t is not None)])


async def _scrape(path: Path) -> str | None:
    try:
        async with asyncio.timeout(SCRAPE_TIMEOUT_S):
            reader, writer = await asyncio.open_unix_connection(str(path))
            try:
                return (await reader.read()).decode()
            finally:
                writer.close()
    except (OSError, TimeoutError) as e:
        log.warning("the gateway process at %s did not answer (%r): its last counters stand in", path, e)
    try:
        return counters_only(_counters_path(path).read_text())
    except FileNotFoundError:
        return None  # it never reported anything
