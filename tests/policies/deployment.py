"""Real deployments for the policy tests: a fault backend process (SGLang's contract, a real SmolLM2
reply), `gateway serve --policies` processes over it, and policy files written from Python."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from policies.auth import hash_key
from tests.e2e.conftest import GatewayProcess
from tests.faults.conftest import USER, FaultBackend, replicas, start, write_config

STARTUP_S = 120.0


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


@contextmanager
def fault_backend(checkpoint: Path) -> Iterator[FaultBackend]:
    backend = FaultBackend(checkpoint)
    try:
        start(backend)
        yield backend
    finally:
        backend.stop()


def models_config(path: Path, checkpoint: Path, url: str, ids: list[str], **entry: Any) -> Path:
    """A gateway config serving every id in `ids` from the backend at `url` (extra keys for each entry)."""
    return write_config(path, [{**replicas(i, checkpoint, [url]), **entry} for i in ids])


@contextmanager
def policy_gateway(config: Path, policies: Path, *args: str) -> Iterator[GatewayProcess]:
    gateway = GatewayProcess("--policies", str(policies), *args, config=config, startup_timeout=STARTUP_S)
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
