"""Without tenant policies, a request's choices are counted against the model's backend slots over real HTTP (SGLang
stand-in): choices above the slots are a 400 naming `n` (or `prompt` when the prompts alone are over); several
choices that do not fit in the free slots wait, then get a 503 with retry-after, never taking the slots other
clients hold; a single choice is never held back."""

from __future__ import annotations

import dataclasses
import threading

import httpx
import pytest

from backends.sglang import SGLangBackend
from gateway.app import create_app
from gateway.models.registry import ModelRegistry
from gateway.models.slots import ChoiceSlots
from tests.gateway.http_server import serve
from tests.gateway.sglang_standin import Script, SGLangStandIn
from tests.gateway.test_app import MODEL, USER

SLOTS = 4
HELD = 9
"""max_tokens of a request whose stream the stand-in holds open after one token."""


@pytest.fixture
def gateway(tokenize_only):
    server = SGLangStandIn(incremental=True)
    ids = tokenize_only.encoder.encode_plain("Sunny and warm.") + [2]
    server.script = lambda body: Script(
        ids=ids, hold_after=1 if body["sampling_params"]["max_new_tokens"] == HELD else None
    )
    slots = ChoiceSlots(SLOTS, wait_s=0.5)
    with serve(server.app) as url:
        model = dataclasses.replace(
            tokenize_only, id=MODEL, backend=SGLangBackend(url, incremental=True), choice_slots=slots
        )
        with serve(create_app(ModelRegistry([model]))) as base, httpx.Client(base_url=base, timeout=30) as client:
            yield client, server, slots


def ask(client: httpx.Client, n: int, max_tokens: int = 8) -> httpx.Response:
    return client.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": USER, "n": n, "max_tokens": max_tokens}
    )


def wait_until(condition) -> None:
    """Poll `condition` until it holds (a bound for an event that must happen, not a speed check)."""
    for _ in range(1500):
        if condition():
            return
        threading.Event().wait(0.02)
    raise AssertionError("condition never held")


def test_n_above_the_models_slots_is_a_400_naming_n(gateway):
    client, server, _ = gateway
    answer = ask(client, SLOTS + 1)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "n" and answer.json()["error"]["code"] == "too_many_choices"
    assert server.bodies == []
    assert ask(client, SLOTS).status_code == 200 and len(server.bodies) == SLOTS


@pytest.mark.parametrize(
    ("prompts", "n", "param"),
    [
        (SLOTS + 1, None, "prompt"),  # the choices come from the prompts alone
        (SLOTS + 1, 1, "prompt"),
        (1, SLOTS + 1, "n"),
        (SLOTS + 1, SLOTS + 1, "n"),  # n alone is over: the client set it above the slots
        (2, SLOTS // 2 + 1, "n"),  # each fits alone; fewer samples keep every prompt
    ],
)
def test_completions_too_many_choices_names_the_field_to_lower(gateway, prompts, n, param):
    client, server, _ = gateway
    body = {"model": MODEL, "prompt": ["Weather?"] * prompts, "max_tokens": 8} | ({} if n is None else {"n": n})
    answer = client.post("/v1/completions", json=body)
    error = answer.json()["error"]
    assert answer.status_code == 400 and error["code"] == "too_many_choices" and error["param"] == param
    assert f"{prompts * (n or 1)} choices" in error["message"]
    if prompts > 1:
        assert f"{prompts} prompts, n={n or 1} each" in error["message"]
    assert server.bodies == []


def test_choices_that_do_not_fit_the_free_slots_wait_then_503_and_single_choices_still_pass(gateway):
    client, server, slots = gateway
    opened = threading.Barrier(SLOTS)

    def hold() -> None:
        with (
            httpx.Client(base_url=str(client.base_url), timeout=30) as other,
            other.stream(
                "POST",
                "/v1/chat/completions",
                json={"model": MODEL, "messages": USER, "stream": True, "max_tokens": HELD},
            ) as r,
        ):
            lines = r.iter_lines()
            next(lines)  # the stream is open (and stays open while `lines` is held)
            opened.wait()
            release.wait()

    release = threading.Event()
    held = [threading.Thread(target=hold) for _ in range(SLOTS - 1)]
    for t in held:
        t.start()
    try:
        opened.wait()
        wait_until(lambda: len(server.bodies) == SLOTS - 1)  # each held stream reached the backend
        assert slots.running == SLOTS - 1
        answer = ask(client, 2)  # 2 choices, 1 slot free: it waits, then a 503 to retry
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
        assert answer.json()["error"]["code"] == "model_busy"
        assert len(server.bodies) == SLOTS - 1  # nothing of it reached the backend
        assert ask(client, 1).status_code == 200  # one choice fits
    finally:
        release.set()
        for t in held:
            t.join()
    wait_until(lambda: slots.running == 0)  # the held streams' slots free once the gateway sees the hang-ups
    assert ask(client, 2).status_code == 200
