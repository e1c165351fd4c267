"""Callgrind's count of some work this process runs under `valgrind --tool=callgrind --instr-atstart=no`: counting
switched on around it, the dump's total read back (the in-process benches share it)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path


def control(*command: str) -> None:
    """Tell this process's callgrind to zero (-z), start or stop counting (-i on / off), or dump its counts (-d)."""
    subprocess.run(["callgrind_control", *command, str(os.getpid())], check=True, capture_output=True)


def dump_total(dump: Path) -> int:
    """The instructions a callgrind dump counted (its `totals:` line)."""
    text = dump.read_text()
    return int(next(line for line in text.splitlines() if line.startswith("totals:")).split()[1])


def counted(out: str, dump: int, work: Callable[[], object]) -> int:
    """The instructions `work()` ran, counted alone: callgrind's dump number `dump` of this process (its
    `--callgrind-out-file` being `out`.%p)."""
    control("-z")
    control("-i", "on")
    work()
    control("-i", "off")
    control("-d")
    return dump_total(Path(f"{out}.{os.getpid()}.{dump}"))
