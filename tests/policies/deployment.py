"""Real deployments for the policy tests: a fault backend process (SGLang's contract, a real SmolLM2
reply), `gateway serve --policies` processes over it, and policy files written from Python."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from backends.checkpoint import load_checkpoint
from policies.auth import hash_key
from tests.e2e.conftest import NO_GRAMMAR_WARMUP, GatewayProcess
from tests.faults.conftest import USER, replicas, sse, write_config
from tests.faults.fault_backend import reply_ids

STARTUP_S = 120.0
SETTLE_S = 10.0
"""Upper bound for a request to settle after its client left; never a speed check."""


def key_of(tenant: str) -> str:
    """The raw API key the tests give `tenant` (its file holds only the hash)."""
    return f"sk-test-{tenant}-0123456789abcdef"


def auth(tenant: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key_of(tenant)}"}


def write_tenant(directory: Path, tenant: str, **fields: Any) -> Path:
    """`directory/TENANT.yaml` with one key (`TENANT-key`) and `fields`."""
    body = {"tenant": tenant, "keys": [{"id": f"{tenant}-key", "sha256": hash_key(key_of(tenant))}], **fields}
    path = directory / f"{tenant}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def models_config(path: Path, checkpoint: Path, url: str, ids: list[str], **entry: Any) -> Path:
    """A gateway config serving every id in `ids` from the backend at `url` (extra keys for each entry)."""
    return write_config(path, [{**replicas(i, checkpoint, [url]), **entry} for i in ids])


@contextmanager
def policy_gateway(config: Path, policies: Path, *args: str) -> Iterator[GatewayProcess]:
    gateway = GatewayProcess(
        "--policies", str(policies), NO_GRAMMAR_WARMUP, *args, config=config, startup_timeout=STARTUP_S
    )
    try:
        yield gateway
    finally:
        gateway.stop()


def chat(model: str, max_tokens: int | None = 2, **fields: Any) -> dict[str, Any]:
    body = {"model": model, "messages": USER, "temperature": 0, **fields}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def audit_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


async def burst(base_url: str, requests: list[tuple[dict[str, str], dict[str, Any]]]) -> list[httpx.Response]:
    """Send every (headers, chat body) at once, each on its own connection; the responses in order."""
    limits = httpx.Limits(max_connections=len(requests), max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=limits) as client:
        return await asyncio.gather(
            *(client.post("/v1/chat/completions", headers=h, json=body) for h, body in requests)
        )


def wait_for_audit(path: Path, request_ids: list[str]) -> list[dict[str, Any]]:
    """The audit lines of `request_ids` (written once each request has settled), waiting SETTLE_S at most."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        by_id = {line["request_id"]: line for line in audit_lines(path)} if path.exists() else {}
        if all(rid in by_id for rid in request_ids) or time.monotonic() > deadline:
            return [by_id[rid] for rid in request_ids]
        time.sleep(0.05)


def held_text(tokens: int) -> str:
    """The text of the fault backend's first `tokens` reply tokens: what a `slow` fault sends before it holds."""
    return load_checkpoint().tokenizer.decode(reply_ids(None)[:tokens])


def cut_stream(client: httpx.Client, headers: dict[str, str], body: dict[str, Any], until: str) -> None:
    """Stream a chat request and leave once its content spells `until`, as a client that goes away mid-stream
    (after the gateway has relayed, and so counted, the tokens of `until`: leaving at the first text would race
    the rest of them into the gateway)."""
    content = ""
    with client.stream("POST", "/v1/chat/completions", headers=headers, json=body) as response:
        assert response.status_code == 200
        for event in sse(response):
            if isinstance(event, dict):
                content += "".join(c["delta"].get("content") or "" for c in event["choices"])
            if content and len(content) >= len(until):
                assert content.startswith(until), content
                return
