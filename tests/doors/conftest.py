"""The gateway in front of the SGLang stand-in (one streaming mode), for the Responses and Messages doors."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest

from backends.checkpoint import EMBEDDED_MODEL_ID, load_checkpoint
from backends.sglang import SGLangBackend
from gateway.app import create_app
from gateway.models.registry import ModelRegistry, served_model_from_checkpoint
from tests.gateway.http_server import serve
from tests.gateway.sglang_standin import Script, SGLangStandIn

IM_END = 2


class Door:
    """The gateway's URL and the stand-in behind it; `say` scripts the next answers."""

    def __init__(self, url: str, server: SGLangStandIn, model, backend_url: str):
        self.url = url
        self.server = server
        self.model = model
        self.backend_url = backend_url

    def another_model(self):
        """The model with a backend client of its own (a client belongs to the event loop that uses it)."""
        return dataclasses.replace(self.model, backend=SGLangBackend(self.backend_url, incremental=True))

    def say(self, text: str, **script) -> None:
        ids = self.model.encoder.encode_plain(text) + [IM_END]
        self.server.script = lambda body: Script(ids=ids, **script)

    def prompt(self) -> str:
        """The text of the last prompt the backend received."""
        return self.model.decode(self.server.bodies[-1]["input_ids"])


@pytest.fixture(scope="session")
def door() -> Iterator[Door]:
    server = SGLangStandIn(incremental=True)
    with serve(server.app) as backend_url:
        model = served_model_from_checkpoint(EMBEDDED_MODEL_ID, load_checkpoint(), "hermes", None)
        model = dataclasses.replace(model, backend=SGLangBackend(backend_url, incremental=True))
        with serve(create_app(ModelRegistry([model]))) as url:
            yield Door(url, server, model, backend_url)


def named_events(response) -> list[dict]:
    """The JSON events of an SSE body whose every event names its type (`event: T`, then `data: {"type": T}`)."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = []
    for block in response.text.split("\n\n")[:-1]:
        name, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        events.append(event)
    return events
