"""The OpenAI-compatible HTTP application."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from backends.asgi import json_response
from gateway.api.bodies import DEFAULT_MAX_BODY_BYTES
from gateway.api.chat import chat_completions
from gateway.api.completions import completions
from gateway.api.front import GatewayApp
from gateway.api.messages import count_tokens, create_message
from gateway.api.models import get_model, list_models
from gateway.api.openapi import openapi
from gateway.api.response_store import MemoryStore, ResponseStore
from gateway.api.responses import (
    cancel_response,
    count_input_tokens,
    create_response,
    delete_response,
    get_response,
    list_input_items,
)
from gateway.api.tenancy import PolicyGate, TenantMiddleware, models_for
from gateway.api.tokenize import detokenize, tokenize
from gateway.models.registry import ModelRegistry
from gateway.observability.metrics import GatewayMetrics, policy_collectors
from gateway.observability.process_metrics import ProcessGroupMetrics
from gateway.process.draining import DrainState
from gateway.process.limits import ConcurrencyLimit

if TYPE_CHECKING:
    from gateway.observability.otlp import Tracing

READY_TIMEOUT_S = 5.0


def create_app(
    registry: ModelRegistry,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    drain: DrainState | None = None,
    response_store: ResponseStore | None = None,
    gate: PolicyGate | None = None,
    metrics: GatewayMetrics | None = None,
    max_concurrency: int | None = None,
    metrics_sockets: tuple[Path, list[Path]] | None = None,
    tracing: Tracing | None = None,
) -> Starlette:
    """The gateway serving `registry`; closing the app (lifespan shutdown) closes the registry's backends.
    While `drain` says so, /ready answers 503 (requests are still served). Stored Responses live in
    `response_store` (default: in this process's memory). With a policy `gate`, every request but the
    probes needs a tenant's key and sees only that tenant's models. `app.state.metrics` is its
    GatewayMetrics (GET /metrics). Past `max_concurrency` requests in flight, a new one gets a 503. In a group of
    gateway processes, `metrics_sockets` are this process's metrics socket and its siblings': /metrics merges them
    all (`?scope=process`: this process's alone). With `tracing`, every request gets a server span and its stages
    child spans, sent over OTLP."""
    drain = drain or DrainState()
    store = response_store or MemoryStore()
    metrics = metrics or GatewayMetrics(registry)
    group = ProcessGroupMetrics(metrics.render, *metrics_sockets) if metrics_sockets else None
    if gate is not None:
        gate.watcher.on_reload = metrics.record_policy_reload
    # exposed without policies too (0), as every family the dashboard queries
    for collector in policy_collectors(
        lambda: gate.limiter.store_errors if gate is not None else 0,
        lambda: len(gate.store.errors) if gate is not None else 0,
        lambda: gate.limiter.settle_backlog.pending if gate is not None else 0,
        lambda: gate.limiter.settle_backlog.dropped if gate is not None else 0,
        lambda: gate.limiter.restores if gate is not None else 0,
    ):
        metrics.registry.register(collector)
    if tracing is not None:
        metrics.registry.register(tracing.collector())

    async def chat(request: Request) -> Response:
        return await chat_completions(request, models_for(request, registry), max_body_bytes)

    async def complete(request: Request) -> Response:
        return await completions(request, models_for(request, registry), max_body_bytes)

    async def responses(request: Request) -> Response:
        return await create_response(request, models_for(request, registry), store, max_body_bytes)

    async def response_tokens(request: Request) -> Response:
        return await count_input_tokens(request, models_for(request, registry), store, max_body_bytes)

    async def stored_response(request: Request) -> Response:
        if request.method == "DELETE":
            return await delete_response(request, store)
        return await get_response(request, store)

    async def input_items(request: Request) -> Response:
        return await list_input_items(request, store)

    async def cancel(request: Request) -> Response:
        return await cancel_response(request, store)

    async def messages(request: Request) -> Response:
        return await create_message(request, models_for(request, registry), max_body_bytes)

    async def messages_tokens(request: Request) -> Response:
        return await count_tokens(request, models_for(request, registry), max_body_bytes)

    async def tokenize_route(request: Request) -> Response:
        return await tokenize(request, models_for(request, registry), max_body_bytes)

    async def detokenize_route(request: Request) -> Response:
        return await detokenize(request, models_for(request, registry), max_body_bytes)

    async def models(request: Request) -> Response:
        return await list_models(models_for(request, registry))

    async def model(request: Request) -> Response:
        return await get_model(models_for(request, registry), request.path_params["model_id"])

    async def health(request: Request) -> Response:
        return json_response({"status": "ok"})

    async def metrics_route(request: Request) -> Response:
        if group is None or request.query_params.get("scope") == "process":
            return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)
        return Response(await group.render(), media_type=CONTENT_TYPE_LATEST)

    async def ready(request: Request) -> Response:
        served = list(registry)
        states = await asyncio.gather(*(_backend_ready(m.backend) for m in served))
        # Ready while any model can serve: one model's backends down must not take the others out of the Service
        # (that model answers 503 backend_unavailable itself).
        ok = any(states) and not drain.draining
        models: dict[str, Any] = {m.id: ready for m, ready in zip(served, states)}
        if gate is not None:  # an open route: model ids are for the tenants that may use them (and /metrics)
            models = {"ready": sum(states), "total": len(states)}
        body = {"ready": ok, "draining": drain.draining, "models": models}
        if gate is not None:
            body["policies"] = await gate.state()
        return json_response(body, status=200 if ok else 503)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        background = [
            *registry.background,
            *store.background,
            *([gate.watcher.run, *gate.limiter.background] if gate else []),
            *([group.serve] if group else []),
        ]
        tasks = [asyncio.create_task(work()) for work in background]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await registry.close()
            await store.close()
            if gate is not None:
                await gate.limiter.close()

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", complete, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/responses/input_tokens", response_tokens, methods=["POST"]),
        Route("/v1/responses/{response_id}", stored_response, methods=["GET", "DELETE"]),
        Route("/v1/responses/{response_id}/input_items", input_items, methods=["GET"]),
        Route("/v1/responses/{response_id}/cancel", cancel, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", messages_tokens, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", model, methods=["GET"]),
        Route("/tokenize", tokenize_route, methods=["POST"]),
        Route("/detokenize", detokenize_route, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", metrics_route, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]
    app = GatewayApp(
        routes=routes,
        layers=[
            *([tracing.middleware()] if tracing else []),
            *([Middleware(ConcurrencyLimit, limit=max_concurrency)] if max_concurrency else []),
            *([Middleware(TenantMiddleware, gate=gate)] if gate else []),
        ],
        metrics=metrics,
        lifespan=lifespan,
    )
    app.state.metrics = metrics
    return app


async def _backend_ready(backend) -> bool:
    if backend is None:
        return True
    try:
        return await asyncio.wait_for(backend.ready(), READY_TIMEOUT_S)
    except (TimeoutError, OSError):
        return False
