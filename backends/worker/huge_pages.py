"""Transparent huge pages for the weights a decode step streams, small pages for the KV cache.

A batch-1 decode step reads every weight once (~480 MB for SmolLM2-135M in float32): with 4 KB pages that is a
TLB miss every 4 KB. torch's CPU allocator asks for 2 MB pages (`madvise(MADV_HUGEPAGE)` on allocations of at
least 2 MB) when `THP_MEM_ALLOC_ENABLE` is set before its first allocation: importing this module sets it (unless
the environment already does), so the worker's `__main__` imports it before torch, and it imports nothing that
imports torch. The KV cache is allocated whole but written a few hundred bytes per token and slot: in 2 MB pages
each first write would commit 2 MB, so it goes back to small pages before anything writes it.
"""

from __future__ import annotations

import ctypes
import os
import sys

TORCH_THP_ENV = "THP_MEM_ALLOC_ENABLE"
_MADV_NOHUGEPAGE = 15
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

os.environ.setdefault(TORCH_THP_ENV, "1")


def keep_small_pages(address: int, length: int) -> bool:
    """`madvise(MADV_NOHUGEPAGE)` the whole pages of [address, address + length) before they are touched; False
    where it cannot (not Linux, or the kernel refused)."""
    start = -(-address // _PAGE) * _PAGE
    end = (address + length) // _PAGE * _PAGE
    if sys.platform != "linux" or end <= start:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return libc.madvise(start, end - start, _MADV_NOHUGEPAGE) == 0


def huge_page_mb() -> int:
    """MB of this process's anonymous memory in transparent huge pages (0 where the kernel does not say)."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0
