"""`python -m backends.worker`'s flags reach what they configure."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest

from backends.client_timeouts import DEFAULT_HEADER_TIMEOUT_S, DEFAULT_MAX_WAITING_HEADS, DEFAULT_SEND_TIMEOUT_S
from backends.worker import __main__ as worker_main


@pytest.mark.parametrize("flag", ["--drain-timeout", "--grammar-compile-budget"])
@pytest.mark.parametrize("value", ["-1", "nan", "inf", "x"])
def test_a_duration_flag_that_is_no_duration_is_refused_at_start_up(flag, value, capsys):
    with pytest.raises(SystemExit) as exit:
        worker_main.parse_args([flag, value])
    assert exit.value.code == 2 and f"argument {flag}: must be a number of seconds >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--header-timeout", "--body-min-rate", "--send-timeout"])
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

    async def serve(state, host: str, port: int, http: tuple, drain_timeout: float) -> None:
        served.append((host, port, http, drain_timeout))

    state = SimpleNamespace(
        engine=SimpleNamespace(stop=lambda: stopped.append(True)),
        grammars=SimpleNamespace(close=lambda: stopped.append("grammars")),
    )
    monkeypatch.setattr(worker_main, "serve", serve)
    monkeypatch.setattr(worker_main, "build_state", lambda args: state)
    monkeypatch.setattr(worker_main, "refuse_unsupported_dtype", lambda args: None)
    monkeypatch.setattr(worker_main.torch, "set_num_threads", lambda n: None)
    monkeypatch.setattr(worker_main.gc, "freeze", lambda: None)
    monkeypatch.setattr(worker_main, "client_timeout_protocol", lambda *bounds: bounds)
    worker_main.main(["--port", "22900", "--drain-timeout", "7.5", "--header-timeout", "3", "--body-min-rate", "5e3"])
    worker_main.main(["--port", "22900", "--send-timeout", "4", "--max-waiting-heads", "9"])
    assert served == [
        ("127.0.0.1", 22900, (3.0, DEFAULT_SEND_TIMEOUT_S, 5000.0, DEFAULT_MAX_WAITING_HEADS), 7.5),
        ("127.0.0.1", 22900, (DEFAULT_HEADER_TIMEOUT_S, 4.0, worker_main.BODY_MIN_RATE, 9), 2.0),
    ]
    assert stopped == [True, "grammars"] * 2  # compile children too


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


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_a_waiting_heads_bound_under_one_is_refused_at_start_up(value, capsys):
    with pytest.raises(SystemExit) as exit:
        worker_main.parse_args(["--max-waiting-heads", value])
    assert exit.value.code == 2 and "argument --max-waiting-heads: must be an integer >= 1" in capsys.readouterr().err
