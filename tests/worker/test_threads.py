"""`--threads auto`: the count measured at start-up, and probed again while serving."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from backends.worker.__main__ import choose_threads, parse_args
from backends.worker.engine import Engine
from backends.worker.threads import (
    FIRST_PROBE_AFTER,
    PROBE_STEPS,
    ThreadTuner,
    describe_cpus,
    measure,
    physical_cores,
    start_up_count,
    usable_cores,
)

from .conftest import prompt_ids, submit


def _tuner(current: int = 2) -> tuple[ThreadTuner, list[int], list[str]]:
    calls: list[int] = []
    reports: list[str] = []
    return ThreadTuner(2, current, reports.append, calls.append), calls, reports


def _serve(tuner: ThreadTuner, step_ms: dict[int, float], steps: int, width: int = 1) -> None:
    """Feed `steps` decode steps whose time depends on the count the tuner has set."""
    for _ in range(steps):
        count = tuner.other if tuner._probe is not None else tuner.current
        tuner.record(step_ms[count] / 1e3, width)


def test_a_clearly_faster_count_replaces_the_current_one():
    tuner, calls, reports = _tuner(current=2)
    tuner.apply(lambda: None)  # no start-up measurement: the count is set as given
    _serve(tuner, {2: 400.0, 1: 120.0}, FIRST_PROBE_AFTER + PROBE_STEPS + 1)
    assert tuner.current == 1 and tuner.switches == 1 and calls == [2, 1]
    assert reports == ["threads auto: 2 -> 1 (decode step 400 ms -> 120 ms at 1 rows)"]


def test_a_losing_probe_restores_the_count_and_waits_longer():
    tuner, calls, _ = _tuner(current=2)
    _serve(tuner, {2: 36.0, 1: 38.0}, FIRST_PROBE_AFTER + PROBE_STEPS + 1)
    assert (tuner.current, tuner.probes, calls) == (2, 1, [1, 2])
    _serve(tuner, {2: 36.0, 1: 38.0}, FIRST_PROBE_AFTER + PROBE_STEPS)
    assert tuner.probes == 1  # the next probe waits twice as long
    _serve(tuner, {2: 36.0, 1: 38.0}, FIRST_PROBE_AFTER)
    assert tuner.probes == 2


def test_a_collapsing_probe_ends_after_one_step():
    tuner, calls, _ = _tuner(current=1)
    _serve(tuner, {1: 120.0, 2: 1800.0}, FIRST_PROBE_AFTER + 1)
    assert calls == [2]
    _serve(tuner, {1: 120.0, 2: 1800.0}, 1)
    assert calls == [2, 1] and tuner._probe is None and tuner.current == 1


def test_a_change_of_batch_width_restarts_the_comparison():
    tuner, calls, _ = _tuner(current=2)
    _serve(tuner, {2: 400.0, 1: 120.0}, FIRST_PROBE_AFTER + 1)
    assert calls == [1]
    _serve(tuner, {2: 400.0, 1: 120.0}, 1, width=3)
    assert calls == [1, 2] and tuner.current == 2 and tuner.switches == 0


def test_threads_flag_takes_auto_or_a_positive_count(capsys):
    assert parse_args([]).threads is None
    assert parse_args(["--threads", "auto"]).threads is None
    assert parse_args(["--threads", "3"]).threads == 3
    for bad in ("0", "1.5", "two"):
        with pytest.raises(SystemExit):
            parse_args(["--threads", bad])
    assert "must be a positive integer or auto" in capsys.readouterr().err


def test_start_up_takes_one_thread_only_when_clearly_faster():
    assert start_up_count({2: 0.010, 1: 0.0098}, 2) == 2
    assert start_up_count({4: 0.010, 1: 0.0089}, 4) == 1


def test_start_up_measures_on_the_calling_thread_and_reports():
    reports: list[str] = []
    tuner = ThreadTuner(2, 2, reports.append, lambda n: None, start_up=True)
    try:
        tuner.apply(lambda: time.sleep({2: 0.05, 1: 0.001}[torch.get_num_threads()]))
    finally:
        torch.set_num_threads(2)
    assert tuner.current == 1 and reports[0].startswith("threads auto: 1 of 2 (start-up decode step")


def test_measure_interleaves_counts_and_keeps_to_its_budget():
    seen: list[int] = []
    medians = measure(lambda: seen.append(torch.get_num_threads()), (2, 1), rounds=3, budget_s=10)
    assert seen == [2, 1] * 4 and set(medians) == {2, 1}
    seen.clear()
    measure(lambda: seen.append(torch.get_num_threads()), (2, 1), rounds=3, budget_s=0)
    assert seen == [2, 1] * 2  # the warm-up round and one timed round


def test_auto_measures_on_the_engine_thread_at_start_up_and_says_what_it_chose(model, checkpoint, capsys):
    usable = usable_cores()
    try:
        tuner, count = choose_threads(None, model.device)
        if usable == 1:
            assert (tuner, count) == (None, 1)
            return
        assert count == usable
        engine = Engine(model, checkpoint.eos_token_ids, tuner=tuner)
        engine.start()  # returns once the engine thread has measured and set its count
        engine.stop()
        assert tuner.current in (usable, 1) and engine.threads == tuner.current
        line = capsys.readouterr().err
        assert f"threads auto: {tuner.current} of {usable} (start-up decode step" in line
        assert "on the engine thread" in line
        assert choose_threads(1, model.device) == (None, 1)
    finally:
        torch.set_num_threads(2)


def test_the_engine_thread_applies_and_feeds_the_tuner(model, checkpoint):
    calls: list[tuple[int, str]] = []
    tuner = ThreadTuner(2, 1, set_threads=lambda n: calls.append((n, threading.current_thread().name)))
    engine = Engine(model, checkpoint.eos_token_ids, tuner=tuner)
    engine.start()
    try:
        submit(engine, "tuned", prompt_ids(checkpoint, "Once upon a time"), max_new_tokens=4).wait()
    finally:
        engine.stop()
        torch.set_num_threads(2)
    assert calls == [(1, "engine")] and tuner.steps == 3  # the first token comes from the prefill


def _cgroup(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("siblings", "cores"), [({0: "0", 1: "1"}, 2), ({0: "0-1", 1: "0-1"}, 1), ({0: "0,2", 2: "0,2", 1: "1,3"}, 2)]
)
def test_physical_cores_count_the_hyper_threads_of_a_core_once(tmp_path, siblings, cores):
    for cpu, text in siblings.items():
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(text + "\n")
    assert physical_cores(siblings, tmp_path) == cores
    assert physical_cores([*siblings, 7], tmp_path) is None  # unreadable: unknown, not guessed
    assert describe_cpus(tmp_path / "absent").endswith("CPUs in the affinity")


@pytest.mark.parametrize(
    ("files", "cap"),
    [
        ({}, None),  # no cgroup files: the affinity
        ({"cpu.max": "max 100000\n"}, None),  # v2 without a quota
        ({"cpu.max": "150000 100000\n"}, 2),  # a limit of 1.5 CPUs rounds up
        ({"cpu.max": "50000 100000\n"}, 1),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1 without a quota
        ({"cpu/cpu.cfs_quota_us": "100000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),
        ({"cpu.max": "garbage"}, None),
    ],
)
def test_usable_cores_is_the_affinity_capped_by_a_cgroup_quota(tmp_path, files, cap):
    affinity = len(os.sched_getaffinity(0))
    expected = affinity if cap is None else min(affinity, cap)
    assert usable_cores(_cgroup(tmp_path, files)) == expected


def test_a_quota_above_the_affinity_leaves_the_affinity(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    quota = _cgroup(tmp_path, {"cpu.max": f"{(affinity + 3) * 100000} 100000"})
    assert usable_cores(quota) == affinity


def test_a_fixed_count_is_set_on_the_engine_thread_not_the_starting_one(model, checkpoint):
    """The starting thread (the worker's main thread loads on one) keeps its count; the engine thread takes its
    own, and says it."""
    torch.set_num_threads(1)
    engine = Engine(model, checkpoint.eos_token_ids, threads=2)
    try:
        engine.start()  # the count read back on the engine thread once it set it
        assert engine.threads == 2 and torch.get_num_threads() == 1
        submit(engine, "counted", prompt_ids(checkpoint, "Once upon a time"), max_new_tokens=2).wait()
    finally:
        engine.stop()
        torch.set_num_threads(2)


def _worker_child(code: str, **env: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter with the test process's environment less its OpenMP wait policy, plus `env`."""
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_the_worker_loads_torch_with_passive_openmp_waits():
    """libgomp reads its wait policy once, when torch loads it: the worker's entry point sets it first, so its
    threads do not spin (GOMP_SPINCOUNT 0; libgomp's default spins 300,000 times before it sleeps)."""
    shown = _worker_child("import backends.worker.__main__", OMP_DISPLAY_ENV="VERBOSE").stderr
    assert "GOMP_SPINCOUNT = '0'" in shown, shown[-2000:]


def test_an_openmp_wait_policy_in_the_environment_wins():
    code = "import os; from backends.worker import passive_waits; print(os.environ['OMP_WAIT_POLICY'])"
    assert _worker_child(code, OMP_WAIT_POLICY="ACTIVE").stdout.strip() == "ACTIVE"
