"""A pytest plugin that prints, per test, the CPU seconds of the test process and of each process it started
(the e2e gateway, its bundled worker, its grammar compile children), read from /proc: where a test's CPU goes.

    PYTHONPATH=$PWD .venv/bin/python -m pytest -n0 -q -s -p bench.cpu_probe_plugin tests/e2e/test_contract_fuzz.py

Lines `CPU <test>: test=… gateway=… worker=…`, then `CPU TOTAL`. A process that ended during a test is not
counted (its CPU goes to its parent only once reaped); put the whole run under /usr/bin/time for the total.
"""

from __future__ import annotations

import os
import resource
import time

TICK = os.sysconf("SC_CLK_TCK")
_started: dict[str, tuple[float, dict[int, tuple[float, str]], float]] = {}
_totals: dict[str, float] = {}


def _descendants() -> dict[int, tuple[float, str]]:
    """pid → (CPU seconds so far, role) of every process below this one."""
    table: dict[int, tuple[int, float, str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        role = "worker" if "backends.worker" in command else "gateway" if "gateway" in command else command[:30]
        table[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK, role)
    found: dict[int, tuple[float, str]] = {}
    parents = {os.getpid()}
    while parents:
        children = {pid for pid, (ppid, _, _) in table.items() if ppid in parents and pid not in found}
        found.update({pid: table[pid][1:] for pid in children})
        parents = children
    return found


def _own() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pytest_runtest_call(item) -> None:
    _started[item.nodeid] = (_own(), _descendants(), time.monotonic())


def pytest_runtest_teardown(item) -> None:
    if item.nodeid not in _started:
        return
    own, before, began = _started.pop(item.nodeid)
    parts = {"test": _own() - own}
    for pid, (cpu, role) in _descendants().items():
        parts[role] = parts.get(role, 0.0) + cpu - before.get(pid, (0.0, role))[0]
    for role, cpu in parts.items():
        _totals[role] = _totals.get(role, 0.0) + cpu
    shown = " ".join(f"{role}={cpu:.2f}" for role, cpu in parts.items())
    print(f"\nCPU {item.name}: {shown} wall={time.monotonic() - began:.1f}")


def pytest_sessionfinish(session) -> None:
    print("\nCPU TOTAL: " + " ".join(f"{role}={cpu:.2f}" for role, cpu in _totals.items()))
