"""Tenants at the HTTP edge: authenticate every request by its key, hide other tenants' models, strip
client-set tenant headers, add the rate-limit headers to every response, and write one audit line
when the request ends (settling whatever it still holds)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import ANTHROPIC_PATH, APIError
from gateway.models.registry import ModelRegistry
from gateway.observability.requests import note_tenant
from policies.audit import AuditLog
from policies.auth import TENANT_HEADERS, AuthError, Caller, authenticate
from policies.limits import FairQueue, Limiter
from policies.store import PolicyStore
from policies.watch import PolicyWatcher

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/health", "/ready", "/openapi.json"})
"""Probes and the API description answer without a key (vLLM's key check guards /v1 only)."""
METRICS_PATH = "/metrics"
"""Every tenant's and model's series: only the keys of a tenant with `metrics: true` (Prometheus') read them."""


@dataclass
class PolicyGate:
    """What a gateway run with `--policies` enforces through: the store (hot reloaded by `watcher`),
    the limiter, per-model fair queues (where a model's backend slots are known) and the audit log."""

    store: PolicyStore
    limiter: Limiter
    queues: dict[str, FairQueue] = field(default_factory=dict)
    audit: AuditLog | None = None
    redis_url: str | None = None

    def __post_init__(self) -> None:
        self.watcher = PolicyWatcher(self.store)
        self._shares: dict[tuple[str, str], asyncio.Semaphore] = {}

    def share(self, model_id: str, tenant: str) -> asyncio.Semaphore | None:
        """The slots of a model's queue one tenant may hold at once: all but one (so that another tenant
        arriving never waits for a whole wave of the first one's choices); None when the model has no queue."""
        queue = self.queues.get(model_id)
        if queue is None:
            return None
        key = (model_id, tenant)
        if key not in self._shares:
            self._shares[key] = asyncio.Semaphore(max(1, queue.capacity - 1))
        return self._shares[key]

    async def state(self) -> dict[str, Any]:
        """What /ready shows of the policies: tenants, problems of the last reload, the limits store
        (asked now)."""
        return {
            "tenants": len(self.store.tenants),
            "problems": len(self.store.errors),  # the files and lines are in the log, not on this open route
            "store": "redis" if self.redis_url else "memory",
            "store_reachable": await self.limiter.probe_store(),
        }


@dataclass
class TenantRequest:
    """One authenticated request: its caller (the policy it was admitted under) and what the audit
    line says about it, filled in as the request goes."""

    caller: Caller
    request_id: str
    started: float = field(default_factory=time.monotonic)
    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str | None = None
    queue_wait_s: float = 0.0
    anthropic: bool = False
    """Whether it came through the Anthropic door: its rate-limit headers carry Anthropic's names too."""
    headers: dict[str, str] = field(default_factory=dict)
    """Rate-limit headers every response of this request carries."""
    prompt: Any = None
    """The prompt, kept only when the tenant's policy audits prompts."""
    release: Any = None
    """An awaitable factory releasing what admission holds (idempotent), or None."""
    served: bool = True
    """False until a backend takes one of its choices (after a slot of the model's fair queue where it has one: refused
    there, or left by its client before, it never does), or once its backends failed before any output: it served
    nothing, and is settled void."""


def tenant_of(request: Request) -> TenantRequest | None:
    """The request's tenant context; None when the gateway runs without policies."""
    return request.scope.get("state", {}).get("tenant")


def models_for(request: Request, registry: ModelRegistry) -> ModelRegistry:
    """The models the caller may see: for a tenant, the others do not exist."""
    tenant = tenant_of(request)
    if tenant is None:
        return registry
    allowed = tenant.caller.policy.models
    return ModelRegistry([m for m in registry if allowed.match(m.id)])


class TenantMiddleware:
    """Authentication, tenant header stripping, rate-limit headers and audit (inside api/front.py: request id set)."""

    def __init__(self, app: ASGIApp, gate: PolicyGate):
        self.app = app
        self.gate = gate
        self.store = gate.store
        self.audit = gate.audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        scope["headers"] = [(k, v) for k, v in scope["headers"] if k not in TENANT_HEADERS]
        state = scope.setdefault("state", {})
        state["gate"] = self.gate
        request_id = state.get("request_id", "")
        try:
            caller = authenticate(self.store, scope["headers"])
        except AuthError as exc:
            self._audit(None, request_id, 401, time.monotonic())
            error = APIError(str(exc), status=401, code="invalid_api_key")
            await error.response(scope["path"])(scope, receive, send)
            return
        if scope["path"] == METRICS_PATH and not caller.policy.metrics:
            self._audit(TenantRequest(caller, request_id), request_id, 403, time.monotonic())
            error = APIError(
                f"the API key {caller.key.id!r} may not read /metrics: its tenant's policy has no 'metrics: true'",
                status=403,
                code="metrics_not_allowed",
                type="permission_error",
            )
            await error.response(scope["path"])(scope, receive, send)
            return
        tenant = state["tenant"] = TenantRequest(caller, request_id, anthropic=scope["path"].startswith(ANTHROPIC_PATH))
        note_tenant(caller.policy.tenant)
        status = 500

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                extra = [(k.encode(), v.encode()) for k, v in tenant.headers.items()]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            if tenant.release is not None:
                await tenant.release()
            self._audit(tenant, request_id, status, tenant.started)

    def _audit(self, tenant: TenantRequest | None, request_id: str, status: int, started: float) -> None:
        if self.audit is None or (tenant is not None and not tenant.caller.policy.audit):
            return
        record: dict[str, Any] = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "request_id": request_id,
            "tenant": tenant and tenant.caller.policy.tenant,
            "key_id": tenant and tenant.caller.key.id,
            "model": tenant and tenant.model,
            "prompt_tokens": tenant.prompt_tokens if tenant else 0,
            "completion_tokens": tenant.completion_tokens if tenant else 0,
            "cached_tokens": tenant.cached_tokens if tenant else 0,
            "status": status,
            "finish_reason": tenant and tenant.finish_reason,
            "latency_ms": round((time.monotonic() - started) * 1000, 3),
            "queue_wait_ms": round(tenant.queue_wait_s * 1000, 3) if tenant else 0.0,
        }
        if tenant is not None and tenant.caller.policy.audit_prompts and tenant.prompt is not None:
            record["prompt"] = tenant.prompt
        try:
            self.audit.write(record)
        except OSError:
            log.exception("the audit line of request %s could not be written", request_id)
