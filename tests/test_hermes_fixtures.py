"""canitoolcall's qwen3-hermes fixtures, replayed through the hermes parser with canitoolcall's own runner and checks.

Every chunking strategy of the default set runs (one, special, token,
rand:1..5:8). The baseline below is what the parser measures today; a file may
improve but never fall below it. The five known failures are calls cut off by
the end of the output: their header and argument fragments were already
streamed and cannot be taken back, while the fixtures expect no call.
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest
from canitoolcall.results import CaseResult, Status

from tests.canitoolcall_adapter import FAMILY
from tests.canitoolcall_common import REPO, cases_by_file, run_fixtures, status_counts

BASELINE_PASSES: dict[str, int] = {
    "basic.jsonl": 8,
    "bug-reports.jsonl": 1,
    "edge.jsonl": 7,
    "engine-tests.jsonl": 10,
    "instruct-2507.jsonl": 5,
    "malformed.jsonl": 1,
    "multiturn.jsonl": 2,
    "parallel.jsonl": 3,
    "thinking-2507.jsonl": 5,
    "truncated.jsonl": 3,
}
"""Fixtures per file whose status is pass or soft_pass."""


@cache
def results() -> dict[str, list[CaseResult]]:
    """Case results by fixture file name."""
    return cases_by_file(run_fixtures("tests.canitoolcall_adapter:HermesAdapter", FAMILY), FAMILY)


def test_every_fixture_file_is_in_the_baseline() -> None:
    assert set(results()) == set(BASELINE_PASSES)


@pytest.mark.parametrize("file", sorted(BASELINE_PASSES))
def test_no_regression_below_the_measured_pass_count(file: str) -> None:
    cases = results()[file]
    statuses = status_counts(cases)
    passed = statuses[Status.PASS] + statuses[Status.SOFT_PASS]
    failing = {
        c.fixture_id: sorted({f"{r.check}@{r.strategy}: {r.detail}" for r in c.checks if r.status is Status.FAIL})[:3]
        for c in cases
        if c.status not in (Status.PASS, Status.SOFT_PASS)
    }
    assert statuses[Status.ERROR] == 0, failing
    assert passed >= BASELINE_PASSES[file], failing


def test_streams_agree_with_each_other_on_every_fixture() -> None:
    """Whatever a fixture's verdict, every chunking gives the same answer (split invariance)."""
    disagreements = defaultdict(list)
    for case in (c for cases in results().values() for c in cases):
        for row in case.checks:
            if row.check in ("split_invariance", "stream_equals_nonstream") and row.status is not Status.PASS:
                disagreements[case.fixture_id].append(f"{row.strategy}: {row.detail}")
    assert not disagreements


def test_cli_runs_the_adapter(tmp_path: Path) -> None:
    """`python -m canitoolcall run --engine tests.canitoolcall_adapter:HermesAdapter` works from the repo root."""
    done = subprocess.run(
        [
            sys.executable, "-m", "canitoolcall", "run",
            "--engine", "tests.canitoolcall_adapter:HermesAdapter",
            "--family", FAMILY, "--id", "qwen3-hermes/parallel-*", "--out", str(tmp_path),
        ],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "qwen3-hermes   pass=3" in done.stdout + done.stderr, done.stderr
