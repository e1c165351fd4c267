"""Imported by the worker's `__main__` before torch: torch's OpenMP threads wait passively unless the environment
sets `OMP_WAIT_POLICY` (libgomp reads it once, when torch loads it).

libgomp's default has a thread that waits for a parallel region spin (GOMP_SPINCOUNT 300,000) before it sleeps. A
decode step runs ~150 parallel regions; on a host whose cores other processes also use, a spinning thread burns the
time slice its sibling needs to reach the region, and 2-thread steps collapse: 1.9-2.5 s a step against ~0.2 s
passive at load average 14-20 on 2 cores, 12x the CPU (bench/RESULTS.md, "Worker, session 11"). On an idle 2-core
host the two measured the same (session 8).
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
