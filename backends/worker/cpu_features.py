"""What this CPU can run: its feature flags, and which weight dtypes oneDNN's packed linears accept on it."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

CPUINFO_ENV = "WORKER_CPUINFO"
"""Test hook: a file read instead of /proc/cpuinfo, to start the worker as if on another CPU."""

X86_REPORTED = ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "avx_ne_convert", "amx_bf16")
ARM_REPORTED = ("asimd", "sve", "bf16")
_AVX512_BF16 = ("avx512bw", "avx512vl", "avx512dq")
"""oneDNN's bf16 needs avx512_core (these three) or avx_ne_convert; torch's check names them so."""


@dataclass(frozen=True)
class CpuFeatures:
    """The architecture and flags /proc/cpuinfo lists; `flags` is None when they are unknown."""

    arch: str
    flags: frozenset[str] | None

    def describe(self) -> str:
        """One line: the architecture and the flags that decide what runs (absent ones omitted)."""
        if self.flags is None:
            return f"{self.arch}: features unknown"
        reported = X86_REPORTED if self.arch == "x86_64" else ARM_REPORTED
        present = [f for f in reported if f in self.flags]
        return f"{self.arch}: {' '.join(present) or 'none of ' + ' '.join(reported)}"


def parse_cpuinfo(text: str) -> CpuFeatures:
    """The first processor's flags: x86 lists `flags`, aarch64 `Features`; anything else is unknown."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "flags":
            return CpuFeatures("x86_64", frozenset(value.split()))
        if key == "Features":
            return CpuFeatures("aarch64", frozenset(value.split()))
    return CpuFeatures("unknown", None)


@functools.cache
def cpu_features() -> CpuFeatures:
    """This machine's features, read once (from $WORKER_CPUINFO when set, else /proc/cpuinfo)."""
    try:
        return parse_cpuinfo(Path(os.environ.get(CPUINFO_ENV) or "/proc/cpuinfo").read_text())
    except OSError:
        return CpuFeatures("unknown", None)


def bf16_missing(features: CpuFeatures) -> tuple[str, ...] | None:
    """The features oneDNN's bf16 linears lack on this CPU: () when it has them, None when unknown."""
    if features.flags is None or features.arch not in ("x86_64", "aarch64"):
        return None
    if features.arch == "aarch64":
        return () if "bf16" in features.flags else ("bf16",)
    if "avx_ne_convert" in features.flags or all(f in features.flags for f in _AVX512_BF16):
        return ()
    return (*(f for f in _AVX512_BF16 if f not in features.flags), "avx_ne_convert")


def onednn_bf16_error() -> str | None:
    """Ask oneDNN itself: its refusal to pack a tiny bf16 weight (ONEDNN_MAX_CPU_ISA caps it too), or None."""
    if not torch.backends.mkldnn.is_available():
        return "torch was built without oneDNN"
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(8, 8, dtype=torch.bfloat16))
    except RuntimeError as e:
        return str(e).splitlines()[0]
    return None


BF16_GEMV_CAPABILITIES = ("AVX2", "AVX512")
"""ATen capabilities whose bfloat16 matrix-vector kernel is vectorized (`torch.backends.cpu.get_cpu_capability()`)."""

ScreenPath = Literal["onednn", "aten-gemv"]


def bf16_screen_path(onednn_bf16_error: str | None, aten_capability: str) -> ScreenPath | None:
    """Which kernel screens the greedy head's logits in bfloat16 on this CPU, or None (the full float32 logits).

    `onednn`: oneDNN's packed bfloat16 weights, at any row count, where oneDNN packs bfloat16 (AVX-512 BF16 CPUs).
    `aten-gemv`: elsewhere on x86 with AVX2, ATen's bfloat16 matrix-vector product (float32 accumulation, one
    bfloat16 rounding of each output: the head's error bound holds), for 1-row steps only: on an AVX2-only CPU
    (emulated with ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2) it reads SmolLM2's head in 2.5 ms against
    5.6 ms for the float32 packed head, but takes 19 ms for 8 rows against 8.7."""
    if onednn_bf16_error is None:
        return "onednn"
    return "aten-gemv" if aten_capability in BF16_GEMV_CAPABILITIES else None


def weights_dtype_refusal(weights_dtype: str, device: str, features: CpuFeatures) -> str | None:
    """Why `--weights-dtype` cannot run here (one line, with the fix), or None when it can.

    fp32 packs on any x86-64 oneDNN supports (SSE4.1 and up, checked with ONEDNN_MAX_CPU_ISA=SSE41), so
    only bf16 is checked; on CUDA oneDNN is not used."""
    if weights_dtype != "bf16" or device != "cpu":
        return None
    missing = bf16_missing(features)
    if missing:
        need = "bf16" if features.arch == "aarch64" else "avx_ne_convert or avx512bw, avx512vl and avx512dq"
        reason = f"this CPU ({features.arch}) lacks {', '.join(missing)}; bf16 weights need {need}"
    else:
        error = onednn_bf16_error()
        if error is None:
            return None
        reason = f"oneDNN cannot pack bf16 weights here ({error})"
    return f"--weights-dtype bf16 cannot run on this CPU: {reason}. Use --weights-dtype fp32."
