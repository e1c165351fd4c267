"""Requests at the worker's app (in process, real engine): aborts that arrive before they are handed to the engine,
admission while grammars compile, a client that stops reading its stream."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx

from backends.worker.__main__ import client_protocol, parse_args
from backends.worker.generations import WorkerState
from backends.worker.server import build_app
from tests.gateway.http_server import serve, small_send_buffers

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


def test_a_client_that_stops_reading_its_stream_is_cut_and_its_slot_freed(checkpoint, engine, grammars):
    """The worker had no send timer: a client that stopped reading a stream held its request's slot and KV for as
    long as it kept the socket open. Here `--send-timeout 0.5`, small socket buffers, and a reader that takes the
    answer's first bytes and then nothing: the connection is cut and the request aborted before its 1,000 tokens."""
    protocol = small_send_buffers(client_protocol(parse_args(["--send-timeout", "0.5"])), high_water=4096)
    app = build_app(WorkerState(checkpoint, engine, grammars, model_path="test"))
    sampling = {"max_new_tokens": 1000, "ignore_eos": True, "temperature": 0}
    logprobs = {"return_logprob": True, "top_logprobs_num": 20}  # ~2 KB an event: the buffers fill in a few tokens
    body = json.dumps({"input_ids": PROMPT, "sampling_params": sampling, "stream": True, **logprobs})
    decoded = engine.stats.decode_tokens
    with serve(app, lifespan="off", http=protocol) as url, socket.socket() as reader:
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.connect(("127.0.0.1", int(url.rsplit(":", 1)[1])))
        reader.sendall(f"POST /generate HTTP/1.1\r\nHost: w\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
        assert reader.recv(16).startswith(b"HTTP/1.1 200")  # then it reads nothing more
        freed_by = time.monotonic() + 120
        while engine.stats.decode_tokens == decoded:  # in a slot (the status line may come before the engine has it)
            assert time.monotonic() < freed_by, "the request never started decoding"
            time.sleep(0.05)
        while engine.active_requests():
            assert time.monotonic() < freed_by, "the worker holds the request of a client that stopped reading"
            time.sleep(0.05)
        assert engine.stats.decode_tokens - decoded < sampling["max_new_tokens"]  # aborted, not finished
        reader.settimeout(10)
        rest = b""
        while data := reader.recv(65536):
            rest += data
        assert b"data: [DONE]" not in rest  # cut, not ended
