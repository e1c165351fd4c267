"""The worker's grammar compile budget (backends/compile_pool.py, the gateway's too): a grammar sent straight to the
worker compiles in a child process killed past its CPU budget, a 400 in the dialect's error shape; a client that
leaves during the compile has its child killed and its request never reaches the engine. In process, real engine and
vocabulary."""

from __future__ import annotations

import asyncio
import json
import os

import httpx
import orjson
import pytest

from backends.compile_pool import PROCESSES
from backends.worker.generations import WorkerState
from backends.worker.grammar import GrammarCache
from backends.worker.server import build_app

PROMPT = [504, 3575, 282, 4649, 314]  # "The capital of France is"
BUDGET_S = 0.3


def nested_any_of(levels: int) -> dict:
    """Twelve levels cost 0.9 s to build and 7.2 s to compile on this vocabulary (tests/gateway/test_grammar_budget)."""
    node: dict = {"type": "string"}
    for i in range(levels):
        node = {"anyOf": [{"type": "object", "properties": {f"k{i}": node}}, {"type": "array", "items": node}]}
    return {"type": "object", "properties": {"a": node}}


HOSTILE = json.dumps(nested_any_of(12))
SMALL = json.dumps({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


def children(cache: GrammarCache) -> list:
    return [c for c in list(cache._pool._idle.queue) if c is not None]


@pytest.fixture(scope="module")
def budgeted(vocabulary_info):
    cache = GrammarCache(vocabulary_info, budget_s=BUDGET_S)
    yield cache
    cache.close()


@pytest.fixture(scope="module")
def client(checkpoint, engine, budgeted):
    app = build_app(WorkerState(checkpoint, engine, budgeted, model_path="test"))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://worker")


def post(client: httpx.AsyncClient, path: str, body: dict) -> httpx.Response:
    async def call() -> httpx.Response:
        return await client.post(path, json=body)

    return asyncio.run(call())


def test_a_schema_over_the_budget_is_a_400_in_each_dialect_and_its_child_is_killed(client, budgeted, engine):
    prefilled = engine.stats.prefill_tokens
    sampling = {"max_new_tokens": 4, "json_schema": HOSTILE}
    answer = post(client, "/generate", {"input_ids": PROMPT, "sampling_params": sampling})
    assert answer.status_code == 400, answer.text
    assert "compile budget of 0.3 s" in answer.json()["error"]["message"]  # SGLang's {"error": {"message"}}
    assert children(budgeted) == []  # the child that ran it was killed (none had compiled anything before)

    vllm = {"prompt": PROMPT, "stream": True, "max_tokens": 4, "structured_outputs": {"json": nested_any_of(12)}}
    answer = post(client, "/v1/completions", vllm)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]  # vLLM's ErrorResponse; a repeat is refused at once, by its key
    assert (error["type"], error["code"]) == ("BadRequestError", 400) and "compile budget" in error["message"]
    assert budgeted.stats.misses == 2 and engine.stats.prefill_tokens == prefilled


def test_a_grammar_within_the_budget_is_checked_in_a_child_and_constrains_the_output(client, budgeted):
    sampling = {"max_new_tokens": 32, "temperature": 0, "json_schema": SMALL}
    answer = post(client, "/generate", {"input_ids": PROMPT, "sampling_params": sampling})
    assert answer.status_code == 200, answer.text
    assert json.loads(answer.json()["text"]).keys() == {"city"}
    assert len(children(budgeted)) == 1  # the child that compiled it in time lives on for the next grammar


def test_a_client_gone_during_the_compile_has_its_child_killed_and_never_reaches_the_engine(
    checkpoint, engine, vocabulary_info
):
    """The client's one disconnect watcher starts with the compile: once it fires, the compile's child is killed
    (under a budget it would not reach) and the answer ends; the request is never prefilled and its rid is free."""
    cache = GrammarCache(vocabulary_info, budget_s=600)
    app = build_app(WorkerState(checkpoint, engine, cache, model_path="test"))
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 4, "json_schema": HOSTILE}, "rid": "leaves"}
    prefilled = engine.stats.prefill_tokens

    async def leave_during_compile() -> list[dict]:
        left, sent, delivered = asyncio.Event(), [], []

        async def receive() -> dict:
            if not delivered:
                delivered.append(True)
                return {"type": "http.request", "body": orjson.dumps(body), "more_body": False}
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/generate", "headers": [], "query_string": b""}
        answer = asyncio.ensure_future(app(scope, receive, send))
        while cache._pool._idle.qsize() == PROCESSES:  # until the job has taken a place in the pool
            await asyncio.sleep(0.01)
        left.set()
        await answer
        return sent

    try:
        sent = asyncio.run(leave_during_compile())
        assert sent[0]["status"] == 499
        while cache._pool._idle.qsize() < PROCESSES:  # the compile's thread hands its place back
            os.sched_yield()
        assert list(cache._pool._idle.queue) == [None] * PROCESSES  # its child was killed, not kept after a compile
        assert cache.stats.misses == 1 and engine.stats.prefill_tokens == prefilled
        again = {**body, "sampling_params": {"max_new_tokens": 2, "temperature": 0}}
        answer = asyncio.run(_post(app, again))
        assert answer.status_code == 200 and answer.json()["meta_info"]["completion_tokens"] == 2  # rid released
    finally:
        cache.close()


async def _post(app, body: dict) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://worker") as c:
        return await c.post("/generate", json=body)
