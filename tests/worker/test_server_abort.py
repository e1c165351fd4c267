"""Requests at the worker's app before they are handed to the engine (in process, real engine): aborts that arrive
meanwhile, admission while grammars compile."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx

from backends.worker.generations import WorkerState
from backends.worker.server import build_app

PROMPT = [504, 3575, 282, 4649, 314]  # "The capital of France is"


def gate_compiles(grammars, monkeypatch) -> tuple[threading.Semaphore, threading.Event]:
    """Hold every compile of `grammars` until the event is set; the semaphore is released as each one starts."""
    compiling, release = threading.Semaphore(0), threading.Event()
    compile = grammars.compile

    def gated(kind: str, text: str, cancel=None):
        compiling.release()
        release.wait()
        return compile(kind, text, cancel)

    monkeypatch.setattr(grammars, "compile", gated)
    return compiling, release


def test_an_abort_while_the_grammar_compiles_keeps_the_request_out_of_the_engine(
    checkpoint, engine, grammars, monkeypatch
):
    compiling, release = gate_compiles(grammars, monkeypatch)
    app = build_app(WorkerState(checkpoint, engine, grammars, model_path="test"))
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    sampling = {"max_new_tokens": 16, "temperature": 0, "json_schema": json.dumps(schema)}
    body = {"input_ids": PROMPT, "sampling_params": sampling, "rid": "aborted-while-compiling"}
    prefilled = engine.stats.prefill_tokens

    async def abort_during_compile() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://worker") as c:
            answer = asyncio.ensure_future(c.post("/generate", json=body))
            try:
                await asyncio.to_thread(compiling.acquire)
                aborted = await c.post("/abort_request", json={"rid": body["rid"]})
                assert aborted.status_code == 200
            finally:
                release.set()
            return await answer

    answer = asyncio.run(abort_during_compile())
    assert answer.status_code == 200
    meta = answer.json()["meta_info"]
    assert (meta["finish_reason"]["type"], meta["completion_tokens"]) == ("abort", 0)
    assert engine.stats.prefill_tokens == prefilled  # never prefilled
    assert engine.active_requests() == 0


def test_requests_whose_grammars_compile_count_against_the_waiting_queue(checkpoint, engine, grammars, monkeypatch):
    """A request is admitted before its grammar compiles and reaches the engine's queue only after: a burst of them
    all passed admission while the queue looked empty, then all waited in the engine past max_waiting (the bound on
    what a worker holds). Those compiling now count: with max_waiting 0, the engine's four free slots are taken by
    four compiling requests, and a fifth is a 503."""
    compiling, release = gate_compiles(grammars, monkeypatch)
    app = build_app(WorkerState(checkpoint, engine, grammars, model_path="test", max_waiting=0))
    sampling = {"max_new_tokens": 1, "temperature": 0, "regex": "[a-z]+"}

    async def burst() -> tuple[list[int], int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://worker") as c:
            first = [
                asyncio.ensure_future(c.post("/generate", json={"input_ids": PROMPT, "sampling_params": sampling}))
                for _ in range(engine.max_batch)
            ]
            try:
                for _ in first:
                    await asyncio.to_thread(compiling.acquire)
                fifth = await c.post("/generate", json={"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1}})
            finally:
                release.set()
            return [(await answer).status_code for answer in first], fifth.status_code

    first, fifth = asyncio.run(burst())
    assert first == [200] * engine.max_batch and fifth == 503


def test_abort_all_ends_every_request_in_flight(checkpoint, engine, grammars):
    """SGLang's /abort_request takes {"abort_all": true} (AbortReq.abort_all): every request ends with an abort; the
    worker answered it 400 ('needs rid')."""
    app = build_app(WorkerState(checkpoint, engine, grammars, model_path="test"))
    sampling = {"max_new_tokens": 400, "ignore_eos": True, "temperature": 0}

    async def abort_all() -> tuple[list[httpx.Response], int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://worker") as c:
            answers = [
                asyncio.ensure_future(c.post("/generate", json={"input_ids": PROMPT, "sampling_params": sampling}))
                for _ in range(2)
            ]
            while engine.active_requests() < 2:
                await asyncio.sleep(0.01)
            aborted = await c.post("/abort_request", json={"abort_all": True})
            return [await a for a in answers], aborted.status_code

    answers, status = asyncio.run(abort_all())
    assert status == 200
    for answer in answers:
        meta = answer.json()["meta_info"]
        assert meta["finish_reason"] == {"type": "abort", "message": "aborted by request"}
        assert meta["completion_tokens"] < 400
