"""CPU feature detection and the worker's bf16 refusal, with the CPU's feature set injected (WORKER_CPUINFO)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from backends.worker.cpu_features import (
    CPUINFO_ENV,
    CpuFeatures,
    bf16_missing,
    bf16_screen_path,
    cpu_features,
    parse_cpuinfo,
    weights_dtype_refusal,
)
from backends.worker.model import LlamaModel
from tests.e2e.conftest import NO_GRAMMAR_WARMUP

from .conftest import prompt_ids

ROOT = Path(__file__).resolve().parents[2]

_X86_HEAD = (
    "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: {model}\nflags\t\t: {flags}\nbugs\t\t: spectre_v1\n"
)
_X86_BASE = "fpu vme de pse tsc msr sse sse2 ssse3 sse4_1 sse4_2 popcnt avx f16c fma bmi1 bmi2 avx2"
AVX2_ONLY = _X86_HEAD.format(model="Intel(R) Xeon(R) CPU E5-2673 v4", flags=_X86_BASE)
AVX512_BF16 = _X86_HEAD.format(
    model="AMD EPYC 9R14",
    flags=f"{_X86_BASE} avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx512_bf16 avx512_vnni",
)
AVX_NE_CONVERT = _X86_HEAD.format(
    model="Intel(R) Xeon(R) 6780E", flags=f"{_X86_BASE} avx_vnni avx_vnni_int8 avx_ne_convert"
)
AARCH64_BF16 = (
    "processor\t: 0\nBogoMIPS\t: 2100.00\n"
    "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm sve i8mm bf16\n"
    "CPU implementer\t: 0x41\nCPU architecture: 8\n"
)
AARCH64_NO_BF16 = AARCH64_BF16.replace(" i8mm bf16", "")


@pytest.mark.parametrize(
    ("text", "arch", "present", "absent"),
    [
        (AVX2_ONLY, "x86_64", {"avx2"}, {"avx512bw", "avx512_bf16", "avx_ne_convert"}),
        (AVX512_BF16, "x86_64", {"avx2", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"}, {"avx_ne_convert"}),
        (AVX_NE_CONVERT, "x86_64", {"avx2", "avx_ne_convert"}, {"avx512f"}),
        (AARCH64_BF16, "aarch64", {"asimd", "sve", "bf16"}, {"avx2"}),
    ],
)
def test_parse_cpuinfo(text, arch, present, absent):
    features = parse_cpuinfo(text)
    assert features.arch == arch
    assert present <= features.flags and not absent & features.flags


def test_unreadable_or_foreign_cpuinfo_is_unknown(tmp_path, monkeypatch):
    assert parse_cpuinfo("processor : 0\ncpu : POWER9\n") == CpuFeatures("unknown", None)
    monkeypatch.setenv(CPUINFO_ENV, str(tmp_path / "absent"))
    cpu_features.cache_clear()
    try:
        assert cpu_features() == CpuFeatures("unknown", None)
    finally:
        cpu_features.cache_clear()


def test_describe_names_the_deciding_flags():
    assert parse_cpuinfo(AVX2_ONLY).describe() == "x86_64: avx2"
    assert parse_cpuinfo(AVX512_BF16).describe() == "x86_64: avx2 avx512f avx512bw avx512vl avx512dq avx512_bf16"
    assert parse_cpuinfo(AARCH64_BF16).describe() == "aarch64: asimd sve bf16"
    assert CpuFeatures("unknown", None).describe() == "unknown: features unknown"


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        (AVX2_ONLY, ("avx512bw", "avx512vl", "avx512dq", "avx_ne_convert")),
        (AVX512_BF16, ()),
        (AVX_NE_CONVERT, ()),
        (AVX2_ONLY.replace("avx2", "avx2 avx512f avx512bw avx512vl"), ("avx512dq", "avx_ne_convert")),
        (AARCH64_BF16, ()),
        (AARCH64_NO_BF16, ("bf16",)),
        ("cpu : POWER9\n", None),
    ],
)
def test_bf16_decision_table(text, missing):
    assert bf16_missing(parse_cpuinfo(text)) == missing


def test_refusal_only_for_bf16_on_a_cpu_without_it():
    avx2 = parse_cpuinfo(AVX2_ONLY)
    refusal = weights_dtype_refusal("bf16", "cpu", avx2)
    assert refusal is not None and "avx512bw, avx512vl, avx512dq, avx_ne_convert" in refusal
    assert refusal.endswith("Use --weights-dtype fp32.") and "\n" not in refusal
    assert weights_dtype_refusal("fp32", "cpu", avx2) is None
    assert weights_dtype_refusal("bf16", "cuda", avx2) is None
    assert "lacks bf16" in weights_dtype_refusal("bf16", "cpu", parse_cpuinfo(AARCH64_NO_BF16))


@pytest.mark.parametrize(
    ("onednn_error", "capability", "path"),
    [
        (None, "AVX512", "onednn"),  # AVX-512 BF16: unchanged, oneDNN's packed bfloat16 at any row count
        (None, "AVX2", "onednn"),
        ("bf16 path needs the cpu support avx_ne_convert or avx512bw, ...", "AVX2", "aten-gemv"),  # AVX2 only
        ("bf16 path needs ...", "AVX512", "aten-gemv"),  # oneDNN capped below AVX-512 (ONEDNN_MAX_CPU_ISA)
        ("bf16 path needs ...", "DEFAULT", None),  # no vectorized ATen kernel: the full float32 logits
        ("torch was built without oneDNN", "SVE256", None),
    ],
)
def test_greedy_screen_decision_table(onednn_error, capability, path):
    assert bf16_screen_path(onednn_error, capability) == path


def _python(*args: str, **env: str) -> subprocess.CompletedProcess:
    """`python *args` from the repository root with `env` added."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _worker(*args: str, **env: str) -> subprocess.CompletedProcess:
    return _python("-m", "backends.worker", "--device", "cpu", *args, **env)


def test_worker_refuses_bf16_on_an_avx2_only_cpu(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(AVX2_ONLY)
    done = _worker("--weights-dtype", "bf16", **{CPUINFO_ENV: str(cpuinfo)})
    assert done.returncode == 2 and done.stdout == ""
    assert "Traceback" not in done.stderr and "loading" not in done.stderr  # refused before the weights
    error = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(error) == 1
    assert "lacks avx512bw, avx512vl, avx512dq, avx_ne_convert" in error[0] and "--weights-dtype fp32" in error[0]


def test_worker_refuses_bf16_when_onednn_is_capped_to_avx2():
    """The real oneDNN refusal (what an AVX2-only machine hits), reproduced by capping its ISA."""
    done = _worker("--weights-dtype", "bf16", ONEDNN_MAX_CPU_ISA="AVX2")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--weights-dtype bf16 cannot run on this CPU" in done.stderr


def test_fp32_packed_linear_runs_on_onednn_capped_to_avx2():
    script = (
        "import torch; from backends.worker.model import _Linear\n"
        "w, x = torch.randn(64, 32), torch.randn(3, 32)\n"
        "lin = _Linear(w, torch.float32, torch.device('cpu'))\n"
        "assert lin.packed and torch.allclose(lin(x), x @ w.T, atol=1e-4)\n"
        "from backends.worker.cpu_features import bf16_screen_path, onednn_bf16_error\n"
        "assert onednn_bf16_error() is not None  # so no oneDNN bf16 screen: ATen's gemv for 1-row steps\n"
        "assert bf16_screen_path(onednn_bf16_error(), torch.backends.cpu.get_cpu_capability()) == 'aten-gemv'\n"
    )
    done = _python("-c", script, ONEDNN_MAX_CPU_ISA="AVX2")
    assert done.returncode == 0, done.stderr


def test_bf16_still_loads_where_the_cpu_has_it(weights, checkpoint):
    refusal = weights_dtype_refusal("bf16", "cpu", cpu_features())
    if refusal is not None:
        pytest.skip(refusal)
    model = LlamaModel(weights, checkpoint.config, slots=1, context=64, weights_dtype="bf16")
    assert model.greedy_head is None  # a screen in the weights' own dtype would save nothing
    ids = prompt_ids(checkpoint, "The capital of France is")
    positions = torch.arange(len(ids)).unsqueeze(0)
    logits = model.forward(torch.tensor([ids]), positions, positions, 0, len(ids))
    assert "Paris" in checkpoint.tokenizer.decode([int(logits[0].argmax())])


def test_gateway_serve_reports_the_workers_refusal(tmp_path):
    (tmp_path / "cpuinfo").write_text(AVX2_ONLY)
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "models:\n  - id: smol\n    backend: {type: worker, threads: 1, weights_dtype: bf16, device: cpu}\n"
    )
    serve = ["-m", "gateway.cli", "serve", "--port", "0", "--config", str(config), NO_GRAMMAR_WARMUP]
    done = _python(*serve, WORKER_CPUINFO=str(tmp_path / "cpuinfo"))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "[worker] error: --weights-dtype bf16 cannot run on this CPU" in done.stderr
    assert "gateway: startup failed: worker did not become ready (exit code 2)" in done.stderr
