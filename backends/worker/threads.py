"""`--threads auto`: the engine thread's torch intra-op thread count, chosen from measured decode step times.

On an idle host every core helps a decode step; on a loaded one each of the ~150 parallel regions of a step waits
for its slowest thread, and two threads on two busy cores measured 400-1,800 ms per step against 115-160 ms with
one. So the count is measured, not guessed: at start-up, and again while serving, where a short probe of the other
count replaces the current one when it is clearly faster.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

PROBE_STEPS = 3
"""Decode steps per probe of the other count, and steps of the current one it is compared with."""
FIRST_PROBE_AFTER = 64
"""Decode steps before the first probe, and after a probe that switched."""
LAST_PROBE_AFTER = 1024
"""The longest wait between probes: each probe that loses doubles the wait up to this."""
SWITCH_MARGIN = 0.9
"""The other count wins when its median step takes under this fraction of the current one's (at start-up: one
thread wins over all cores only so)."""


CPU_SYSFS = Path("/sys/devices/system/cpu")
"""Where Linux lays out each CPU's topology (cpuN/topology/thread_siblings_list)."""
CGROUP_ROOT = Path("/sys/fs/cgroup")
"""Where a container sees its own cgroup (v2: cpu.max; v1: cpu/cpu.cfs_quota_us and cpu.cfs_period_us)."""


def usable_cores(cgroup_root: Path = CGROUP_ROOT) -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup CPU quota rounded up (a Kubernetes
    CPU limit is a quota, not an affinity: threads past it are throttled, which a decode step pays per region)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _cgroup_quota(cgroup_root)
    return max(1, min(cores, math.ceil(quota))) if quota is not None else cores


def physical_cores(cpus: Iterable[int], sysfs: Path = CPU_SYSFS) -> int | None:
    """The cores `cpus` run on (hyper-threads of one core count once), or None where the topology is unreadable:
    two threads on one core's siblings share its FMA units, which a prefill's products keep busy."""
    siblings = set()
    for cpu in cpus:
        try:
            siblings.add((sysfs / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text().strip())
        except OSError:
            return None
    return len(siblings)


def describe_cpus(sysfs: Path = CPU_SYSFS) -> str:
    """The CPUs this process may run on, and on how many cores (for the start-up line and the benches)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    cores = physical_cores(cpus, sysfs)
    return f"{len(cpus)} CPUs in the affinity" + (f" on {cores} cores" if cores is not None else "")


def _cgroup_quota(root: Path) -> float | None:
    """CPUs' worth of the cgroup's quota, or None without one (or without a readable cgroup file)."""
    try:
        fields = (root / "cpu.max").read_text().split()
        return int(fields[0]) / int(fields[1]) if fields[0] != "max" else None
    except (OSError, ValueError, IndexError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def measure(
    step: Callable[[], None], counts: tuple[int, ...], rounds: int = 3, budget_s: float = 1.0
) -> dict[int, float]:
    """The median seconds of `step` under each thread count, the counts interleaved after one warm-up round;
    fewer rounds once `budget_s` is spent (a loaded host makes every step slow)."""
    times: dict[int, list[float]] = {n: [] for n in counts}
    began = time.perf_counter()
    for round_ in range(rounds + 1):
        for n in counts:
            torch.set_num_threads(n)
            started = time.perf_counter()
            step()
            if round_:
                times[n].append(time.perf_counter() - started)
        if round_ and time.perf_counter() - began > budget_s:
            break
    return {n: statistics.median(t) for n, t in times.items()}


def start_up_count(medians: dict[int, float], most: int) -> int:
    """All cores unless one thread's median step is clearly shorter (prefill chunks gain more from all cores than
    decode steps show)."""
    return 1 if medians[1] < SWITCH_MARGIN * medians[most] else most


class ThreadTuner:
    """Chooses between `most` threads and one from the decode steps the engine times.

    Call `apply` once on the engine thread (torch's thread count belongs to the thread that sets it), then
    `record` after every decode step. Every so often the next PROBE_STEPS steps run with the other count; it
    replaces the current one when its median step is clearly shorter at the same batch width. A probe step
    slower than twice the current median ends the probe at once (a collapsing count costs one step)."""

    def __init__(
        self,
        most: int,
        current: int,
        report: Callable[[str], None] = lambda _: None,
        set_threads: Callable[[int], None] = torch.set_num_threads,
        start_up: bool = False,
    ):
        """`start_up`: `apply` first measures which count is faster (`current` is then only a placeholder)."""
        self.counts = (most, 1)
        self._start_up = start_up
        self.current = current
        self._report = report
        self._set_threads = set_threads
        self._wait = FIRST_PROBE_AFTER
        self._since_probe = 0
        self._width = 0
        self._recent: list[float] = []
        self._probe: list[float] | None = None
        self.steps = 0
        self.probes = 0
        self.switches = 0

    @property
    def other(self) -> int:
        return self.counts[1] if self.current == self.counts[0] else self.counts[0]

    def apply(self, decode_step: Callable[[], None]) -> None:
        """Set the current count on the calling thread, the one that runs the decode steps; when a start-up
        measurement is due, choose it first by timing `decode_step` (a batch-1 step) there with each count."""
        if self._start_up:
            most = self.counts[0]
            medians = measure(decode_step, self.counts)
            self.current = start_up_count(medians, most)
            self._report(
                f"threads auto: {self.current} of {most} (start-up decode step {medians[most] * 1e3:.0f} ms with "
                f"{most}, {medians[1] * 1e3:.0f} ms with 1, on the engine thread; re-measured while serving)"
            )
        self._set_threads(self.current)

    def record(self, seconds: float, width: int) -> None:
        """One decode step of `width` rows took `seconds` (under the count set when it ran)."""
        self.steps += 1
        if width != self._width:  # steps of another width do not compare: start over
            self._width, self._recent = width, []
            if self._probe is not None:
                self._probe = None
                self._set_threads(self.current)
            return
        if self._probe is not None:
            self._record_probe(seconds)
            return
        self._recent = [*self._recent[-(PROBE_STEPS - 1) :], seconds]
        self._since_probe += 1
        if self._since_probe >= self._wait and len(self._recent) == PROBE_STEPS:
            self._probe = []
            self.probes += 1
            self._set_threads(self.other)

    def _record_probe(self, seconds: float) -> None:
        assert self._probe is not None
        self._probe.append(seconds)
        current = statistics.median(self._recent)
        if seconds > 2 * current:
            self._end_probe(switch=False)
        elif len(self._probe) == PROBE_STEPS:
            probed = statistics.median(self._probe)
            self._end_probe(switch=probed < SWITCH_MARGIN * current, probed=probed, current=current)

    def _end_probe(self, switch: bool, probed: float = 0.0, current: float = 0.0) -> None:
        self._probe, self._since_probe = None, 0
        if switch:
            self._report(
                f"threads auto: {self.current} -> {self.other} (decode step {current * 1e3:.0f} ms -> "
                f"{probed * 1e3:.0f} ms at {self._width} rows)"
            )
            self.current, self.switches, self._wait, self._recent = self.other, self.switches + 1, FIRST_PROBE_AFTER, []
        else:
            self._set_threads(self.current)
            self._wait = min(2 * self._wait, LAST_PROBE_AFTER)


def parse_threads(value: str) -> int | None:
    """`--threads`: a positive count, or `auto` (None)."""
    if value == "auto":
        return None
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer or auto, got {value!r}")
    return int(value)
