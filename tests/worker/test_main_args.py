"""`python -m backends.worker`'s flags reach what they configure."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest

from backends.worker import __main__ as worker_main


@pytest.mark.parametrize("flag", ["--drain-timeout", "--grammar-compile-budget"])
@pytest.mark.parametrize("value", ["-1", "nan", "inf", "x"])
def test_a_duration_flag_that_is_no_duration_is_refused_at_start_up(flag, value, capsys):
    with pytest.raises(SystemExit) as exit:
        worker_main.parse_args([flag, value])
    assert exit.value.code == 2 and f"argument {flag}: must be a number of seconds >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--header-timeout", "--body-min-rate"])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "x"])
def test_a_client_bound_that_would_refuse_every_request_is_refused_at_start_up(flag, value, capsys):
    with pytest.raises(SystemExit) as exit:
        worker_main.parse_args([flag, value])
    assert exit.value.code == 2 and f"argument {flag}: must be a finite number > 0" in capsys.readouterr().err


def test_the_grammar_compile_budget_defaults_to_the_gateways():
    assert worker_main.parse_args([]).grammar_compile_budget == 2.0
    assert worker_main.parse_args(["--grammar-compile-budget", "0"]).grammar_compile_budget == 0


def test_the_drain_timeout_and_client_bounds_reach_serve(monkeypatch):
    served: list[tuple] = []
    stopped: list[bool] = []

    async def serve(state, host: str, port: int, *bounds: float) -> None:
        served.append((host, port, *bounds))

    state = SimpleNamespace(
        engine=SimpleNamespace(stop=lambda: stopped.append(True)),
        grammars=SimpleNamespace(close=lambda: stopped.append("grammars")),
    )
    monkeypatch.setattr(worker_main, "serve", serve)
    monkeypatch.setattr(worker_main, "build_state", lambda args: state)
    monkeypatch.setattr(worker_main, "refuse_unsupported_dtype", lambda args: None)
    monkeypatch.setattr(worker_main.torch, "set_num_threads", lambda n: None)
    monkeypatch.setattr(worker_main.gc, "freeze", lambda: None)
    worker_main.main(["--port", "22900", "--drain-timeout", "7.5", "--header-timeout", "3", "--body-min-rate", "5e3"])
    assert (served, stopped) == ([("127.0.0.1", 22900, 7.5, 3.0, 5000.0)], [True, "grammars"])  # compile children too


def test_the_worker_serves_with_garbage_collection_on(monkeypatch):
    """`python -m backends.worker` starts with automatic collection off (backends/worker/start_collection.py) and
    serves with it on; a process that only imports the module (this one) keeps its own."""
    assert gc.isenabled()
    collecting: list[bool] = []

    async def serve(*args: object) -> None:
        collecting.append(gc.isenabled())

    state = SimpleNamespace(engine=SimpleNamespace(stop=lambda: None), grammars=SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(worker_main, "serve", serve)
    monkeypatch.setattr(worker_main, "build_state", lambda args: state)
    monkeypatch.setattr(worker_main, "refuse_unsupported_dtype", lambda args: None)
    monkeypatch.setattr(worker_main.torch, "set_num_threads", lambda n: None)
    monkeypatch.setattr(worker_main.gc, "freeze", lambda: None)
    gc.disable()  # as the worker's own start has it
    try:
        worker_main.main(["--port", "22901"])
    finally:
        gc.enable()
    assert collecting == [True]
