"""What a client sees when the gateway itself fails: a body too large however it is sent, a crash before the
answer (a 500 in OpenAI's shape from the middleware), and a crash mid-stream (an error event, then [DONE])."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence

import httpx
import pytest

from backends.checkpoint import EMBEDDED_MODEL_ID
from backends.sglang import SGLangBackend
from gateway.app import create_app
from gateway.families.base import OutputParser
from gateway.families.hermes import HermesFamily, HermesParser
from gateway.models.registry import ModelRegistry
from gateway.types import ChatRequest, Delta, Piece
from tests.gateway.http_server import serve
from tests.gateway.sglang_standin import Script

MODEL = EMBEDDED_MODEL_ID
WAIT_S = 30
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


class RenderCrash(HermesFamily):
    """A family whose renderer has a bug."""

    def render(self, request: ChatRequest) -> str:
        raise RuntimeError("a bug in the renderer")


class ParserCrash(HermesFamily):
    """A family whose parser breaks on its second batch of pieces, after output was streamed."""

    def parser(self, request: ChatRequest, prompt: str) -> OutputParser:
        return _BreaksLater(super().parser(request, prompt))


class _BreaksLater(HermesParser):
    def __init__(self, inner: OutputParser):
        self._inner = inner
        self._fed = 0

    def feed(self, pieces: Sequence[Piece]) -> list[Delta]:
        self._fed += 1
        if self._fed == 2:
            raise RuntimeError("a bug in the parser")
        return self._inner.feed(pieces)


def _with_family(model, family_class):
    return dataclasses.replace(model, family=family_class(model.family.context))


@pytest.fixture
def small_body_gateway(tokenize_only) -> Iterator[httpx.Client]:
    app = create_app(ModelRegistry([tokenize_only]), max_body_bytes=1024)
    with serve(app) as base, httpx.Client(base_url=base, timeout=WAIT_S) as client:
        yield client


def _chunks(total: int, size: int = 256) -> Iterator[bytes]:
    body = json.dumps({"model": MODEL, "prompt": "x" * total}).encode()
    for i in range(0, len(body), size):
        yield body[i : i + size]


def test_a_chunked_body_over_the_limit_is_a_413(small_body_gateway):
    response = small_body_gateway.post("/tokenize", content=_chunks(4096))
    assert response.request.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in response.request.headers
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "request_too_large"
    fits = small_body_gateway.post("/tokenize", content=_chunks(100))
    assert fits.status_code == 200 and fits.json()["count"] > 0


def test_a_crash_before_the_answer_is_a_500_in_openai_shape(tokenize_only):
    model = _with_family(tokenize_only, RenderCrash)
    with serve(create_app(ModelRegistry([model]))) as base, httpx.Client(base_url=base, timeout=WAIT_S) as client:
        response = client.post("/v1/chat/completions", json=CHAT, headers={"x-request-id": "crash-1"})
        assert response.status_code == 500
        assert response.json() == {
            "error": {"message": "internal server error", "type": "server_error", "param": None, "code": None}
        }
        assert response.headers["x-request-id"] == "crash-1"
        assert client.get("/health").status_code == 200, "the gateway keeps serving"


def test_a_crash_mid_stream_is_an_error_event_then_done(standin, tokenize_only):
    server, url = standin
    model = _with_family(tokenize_only, ParserCrash)
    model = dataclasses.replace(model, backend=SGLangBackend(url, incremental=server.incremental))
    ids = model.encoder.encode_plain(" one two three four") + [2]
    server.script = lambda body: Script(ids=ids)
    with serve(create_app(ModelRegistry([model]))) as base, httpx.Client(base_url=base, timeout=WAIT_S) as client:
        response = client.post("/v1/chat/completions", json={**CHAT, "stream": True})
        assert response.status_code == 200
        frames = response.text.split("\n\n")
        assert frames[-2:] == ["data: [DONE]", ""], frames[-3:]
        events = [json.loads(f.removeprefix("data: ")) for f in frames[:-2]]
        assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert events[-1] == {
            "error": {"message": "internal error while streaming", "type": "server_error", "param": None, "code": None}
        }
        assert all("error" not in e for e in events[:-1])
