"""The `gateway` command."""

from __future__ import annotations

import argparse
import gc
import ipaddress
import os
import signal
import sys
import threading
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.observability.access_log import LEVELS, configure_logging
from gateway.process.config import (
    BackendConfig,
    ConfigError,
    GatewayConfig,
    ModelEntry,
    default_config,
    known_family,
    load_config,
    worker_threads,
)
from gateway.process.limits import ServerLimits
from policies import commands as policy_commands

if TYPE_CHECKING:
    import uvicorn

REDIS_URL_ENV = "LLM_GATEWAY_REDIS_URL"
"""`--redis` when it is not given: a URL with a password stays out of the command line (ps, /proc/PID/cmdline)."""
REDIS_PASSWORD_ENV = "LLM_GATEWAY_REDIS_PASSWORD"
"""The Redis password when the URL carries none (a Secret's key as it is: no URL escaping)."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.command == "policy":
        return policy_commands.run(args)
    try:
        config = _serve_config(args)
        _check_exposure(args)
        override_limits(config.server, args)
        _check_workers(config, args)
    except ConfigError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 2
    from gateway.process.group import process_role

    role = process_role()  # a process of a group: its lines take turns with its siblings' (whole_lines.py)
    configure_logging(args.log_level, role.lines_lock if role else None)
    if args.otlp_endpoint:
        config.tracing.endpoint = args.otlp_endpoint
    return _serve(config, args, argv)


def build_parser() -> argparse.ArgumentParser:
    """The command line: `gateway serve [options]`."""
    parser = argparse.ArgumentParser(prog="gateway", description="OpenAI-compatible LLM gateway")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve", help="serve the configured models (default: the embedded SmolLM2 on a bundled worker)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--config", type=Path, help="YAML model configuration (see gateway/process/config.py)")
    serve.add_argument(
        "--model", type=Path, help="a GGUF file or Hugging Face directory to serve instead of the embedded model"
    )
    serve.add_argument("--model-id", help="the id clients use for --model (default: the file or directory name)")
    serve.add_argument(
        "--family",
        help="model family of --model (default: inferred from the checkpoint's architecture, chat template and "
        "added tokens)",
    )
    serve.add_argument(
        "--backend-url",
        action="append",
        help="serve through this SGLang server instead of a bundled worker (repeat it for replicas)",
    )
    serve.add_argument("--request-timeout", type=_positive, help="deadline of one request in seconds (default: 600)")
    serve.add_argument(
        "--drain-delay",
        type=_non_negative,
        default=0.0,
        help="on SIGTERM, seconds to keep serving new requests while /ready says 503 (default: 0)",
    )
    serve.add_argument(
        "--drain-timeout",
        type=_non_negative,
        default=30.0,
        help="on SIGTERM, seconds in-flight requests get to finish before they are cut (default: 30)",
    )
    serve.add_argument(
        "--threads",
        type=_worker_threads,
        help="CPU threads of the bundled worker, or auto (the default: measured, within the cores and CPU quota)",
    )
    serve.add_argument(
        "--workers",
        type=_positive_int,
        help="gateway processes sharing the port (default: 1; the bundled workers are started once for all)",
    )
    serve.add_argument(
        "--default-max-tokens",
        type=int,
        help="max_tokens for requests that name none (default: 512 for the embedded model, else the context left)",
    )
    serve.add_argument("--max-body-bytes", type=_positive_int, help="largest request body (default: 16 MiB)")
    serve.add_argument(
        "--max-concurrency", type=_positive_int, help="requests served at once; past it a 503 (default: no limit)"
    )
    serve.add_argument(
        "--header-timeout",
        type=_positive,
        help="seconds a request's line and headers may take to arrive; also the longest pause inside a body and the "
        "grace before --body-min-rate counts (default: 10)",
    )
    serve.add_argument(
        "--body-min-rate",
        type=_positive,
        metavar="BYTES",
        help="bytes a second a request body must average once the header timeout has passed since its headers; a "
        "slower one is cut off, however often it sends a byte (default: 65536)",
    )
    serve.add_argument(
        "--send-timeout",
        type=_positive,
        help="seconds a client may take no bytes of its answer (its socket full) before it is cut off (default: 60)",
    )
    serve.add_argument(
        "--max-waiting-heads",
        type=_positive_int,
        metavar="N",
        help="connections that may wait for a request's head at once (idle kept-alive ones, slow heads), per gateway "
        "process; past it the one waiting longest is closed (default: 512)",
    )
    serve.add_argument(
        "--grammar-compile-budget",
        type=_non_negative,
        metavar="SECONDS",
        help="CPU seconds a request's grammar may cost to build and compile; past it a 400 naming the schema "
        "(default: 2; 0: no budget, grammars are built in the gateway's own process)",
    )
    serve.add_argument(
        "--grammar-warmup",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="load xgrammar's grammar compiler (~0.2 CPU-s) beside the models' start and convert the vocabularies "
        "before serving, so that the first request needing a grammar (tools, response_format) does not wait for "
        "them (default: on; --no-grammar-warmup: at the first such request, and a process that never needs one "
        "never pays it: only its modules are found at start, under 5 ms)",
    )
    serve.add_argument(
        "--log-level",
        choices=LEVELS,
        default="info",
        help="log level; at info and below every request writes one JSON access line (default: info)",
    )
    serve.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        type=_http_url,
        help="send OpenTelemetry spans over OTLP/HTTP to this collector (e.g. http://otel-collector:4318; "
        "default: OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else no spans)",
    )
    _add_proxy_options(serve)
    _add_policy_options(serve)
    policy_commands.add_commands(sub)
    return parser


def _add_proxy_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--proxy-headers",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="take a request's scheme and client address from X-Forwarded-Proto / X-Forwarded-For when its peer is "
        "one of --forwarded-allow-ips (a proxy in the pod, a TLS-terminating sidecar); the scheme is the tracing "
        "span's url.scheme. --no-proxy-headers: always the connection's own, and ~7 K instructions a request less "
        "(default: on)",
    )
    serve.add_argument(
        "--forwarded-allow-ips",
        type=_trusted_proxies,
        metavar="ADDRESSES",
        help="comma-separated addresses and networks (10.0.0.0/8) of the proxies whose X-Forwarded-* headers are "
        "believed, or * for every peer; any other peer's are ignored (default: $FORWARDED_ALLOW_IPS, else "
        "127.0.0.1,::1)",
    )


def _trusted_proxies(text: str) -> str:
    """Addresses and networks, or "*": uvicorn takes a word it cannot parse for a literal, which no TCP peer
    matches, so a typo would silently trust nobody."""
    if text.strip() == "*":
        return "*"
    for item in text.split(","):
        try:
            ipaddress.ip_network(item.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item.strip()!r} is not an IP address or network") from None
    return text


def uvicorn_config(app: object, args: argparse.Namespace, limits: ServerLimits) -> uvicorn.Config:
    """How uvicorn serves `app`: the address, the drain, the client timeouts, the proxy headers from the command
    line; uvicorn's own access log and logging setup off (the gateway writes its own)."""
    import uvicorn

    from backends.client_timeouts import client_timeout_protocol

    return uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=args.drain_timeout,
        proxy_headers=args.proxy_headers,
        forwarded_allow_ips=args.forwarded_allow_ips,
        http=client_timeout_protocol(
            limits.header_timeout_s, limits.send_timeout_s, limits.body_min_rate, limits.max_waiting_heads
        ),
    )


def _add_policy_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--policies", type=Path, help="directory of tenant policy files: every request needs a tenant's API key"
    )
    serve.add_argument(
        "--redis",
        metavar="URL",
        default=os.environ.get(REDIS_URL_ENV) or None,
        help="share state among gateway replicas through this Redis: tenant limits, stored Responses (default: "
        f"${REDIS_URL_ENV}, else in this process's memory); its password, when the URL has none, comes from "
        f"${REDIS_PASSWORD_ENV}: the environment keeps both off the command line",
    )
    serve.add_argument(
        "--redis-timeout",
        type=_positive,
        metavar="SECONDS",
        help="seconds a Redis call (connecting included) may go unanswered before Redis counts as unreachable: "
        "tenant limits then follow each policy's on_store_error, stored Responses answer 503 (default: 0.5 for "
        "the limits, 1 for stored Responses)",
    )
    serve.add_argument("--audit-log", type=Path, metavar="FILE", help="audit lines go here (default: stdout)")
    serve.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve without --policies on an address other than loopback (anyone who reaches it can use it)",
    )


def _check_exposure(args: argparse.Namespace) -> None:
    """Without policies, only loopback, unless the operator says otherwise."""
    if args.forwarded_allow_ips is not None and not args.proxy_headers:
        raise ConfigError("--forwarded-allow-ips needs --proxy-headers (it names whose X-Forwarded-* headers count)")
    if args.redis_timeout is not None and not args.redis:
        raise ConfigError("--redis-timeout needs --redis")
    if args.policies is not None:
        if not args.policies.is_dir():
            raise ConfigError(f"--policies: {args.policies} is not a directory")
        return
    if args.audit_log:
        raise ConfigError("--audit-log needs --policies")
    if not _loopback(args.host) and not args.allow_unauthenticated:
        raise ConfigError(
            f"refusing to serve on {args.host} without --policies: anyone who reaches it could use it; "
            "pass --policies DIR, or --allow-unauthenticated to do it anyway"
        )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def override_limits(limits: ServerLimits, args: argparse.Namespace) -> None:
    """The server limits given on the command line win over the configuration's."""
    if args.max_body_bytes is not None:
        limits.max_body_bytes = args.max_body_bytes
    if args.max_concurrency is not None:
        limits.max_concurrency = args.max_concurrency
    if args.header_timeout is not None:
        limits.header_timeout_s = args.header_timeout
    if args.send_timeout is not None:
        limits.send_timeout_s = args.send_timeout
    if args.body_min_rate is not None:
        limits.body_min_rate = args.body_min_rate
    if args.max_waiting_heads is not None:
        limits.max_waiting_heads = args.max_waiting_heads
    if args.workers is not None:
        limits.workers = args.workers
    if args.grammar_compile_budget is not None:
        limits.grammar_compile_s = args.grammar_compile_budget or None


def redis_client_options(args: argparse.Namespace, env: Mapping[str, str] = os.environ) -> dict[str, float | str]:
    """What the limiter's and the response store's Redis clients get from the command line and the environment
    (their defaults else); redis-py prefers a password in the URL to this one."""
    options: dict[str, float | str] = {} if args.redis_timeout is None else {"timeout_s": args.redis_timeout}
    if env.get(REDIS_PASSWORD_ENV):
        options["password"] = env[REDIS_PASSWORD_ENV]
    return options


def _check_workers(config: GatewayConfig, args: argparse.Namespace) -> None:
    """Tenant limits counted in one process's memory would be wrong in a group: they need the shared store; with
    policies a model's backend slots are divided among the processes' fair queues, one at least each."""
    workers = config.server.workers
    if workers > 1 and args.policies is not None and not args.redis:
        raise ConfigError(
            f"{workers} gateway processes with --policies need --redis: each process would count the tenant "
            "limits on its own (pass --redis URL, or --workers 1)"
        )
    for i, entry in enumerate(config.models if args.policies is not None else ()):
        slots = entry.gateway_slots()
        if slots is not None and slots < workers:
            field = "max_running" if entry.max_running is not None else "backend.max_batch"
            raise ConfigError(
                f"models[{i}].{field}: {slots} backend slots of {entry.id!r} cannot be divided among {workers} "
                "gateway processes (--workers): each needs one at least; raise it or lower --workers"
            )


def _http_url(text: str) -> str:
    if not text.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"{text} is not an http:// or https:// URL")
    return text


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _worker_threads(text: str) -> int | None:
    try:
        return worker_threads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text}: {exc}") from None


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number >= 0")
    return value


_PER_MODEL_FLAGS = {
    "model": ("--model", "checkpoint"),
    "backend_url": ("--backend-url", "backend.urls"),
    "model_id": ("--model-id", "id"),
    "family": ("--family", "family"),
    "request_timeout": ("--request-timeout", "backend.request_timeout_s"),
    "threads": ("--threads", "backend.threads"),
    "default_max_tokens": ("--default-max-tokens", "default_max_tokens"),
}
"""Flags that describe the one model served without --config, and the key each is in a config file's model."""


def _serve_config(args: argparse.Namespace) -> GatewayConfig:
    if args.config:
        for name, (flag, key) in _PER_MODEL_FLAGS.items():
            if getattr(args, name) is not None:
                raise ConfigError(f"{flag} cannot be combined with --config: set `{key}` of the model in the file")
        return load_config(args.config)
    config = default_config()
    entry = config.models[0]
    if args.model:
        if not args.model.exists():
            raise ConfigError(f"--model: {args.model} does not exist")
        entry = ModelEntry(id=args.model_id or args.model.stem, family=args.family, checkpoint=args.model.resolve())
    elif args.model_id:
        entry.id = args.model_id
    entry.family = known_family(args.family, "--family")
    if args.default_max_tokens is not None or args.model:
        entry.default_max_tokens = args.default_max_tokens
    entry.backend = (
        BackendConfig(type="sglang", urls=args.backend_url) if args.backend_url else BackendConfig(threads=args.threads)
    )
    if args.request_timeout is not None:
        entry.backend.request_timeout_s = args.request_timeout
    return GatewayConfig(models=[entry])


def _stop(signum: int, frame: object) -> None:
    """SIGTERM / SIGINT outside uvicorn (while loading, or re-raised by uvicorn after its drain)."""
    raise SystemExit(0)


def _serve(config: GatewayConfig, args: argparse.Namespace, argv: list[str]) -> int:
    from gateway.process.group import process_role

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    role = process_role()
    if role is None and config.server.workers > 1:
        return _serve_group(config, args, argv)  # the parent: it loads no model and imports no app

    # The start's imports and loads (tokenizers, the families' tables: objects that all live on) set off no
    # collection, which would walk them all for no garbage: one collection before the freeze below, then collection
    # is on again.
    gc.disable()
    import uvicorn  # noqa: F401  (uvicorn_config's, loaded before the freeze with the rest)

    from backends.xgrammar_core import XGrammarLayoutError, check_layout, without_torch

    without_torch()  # this process runs no model: xgrammar's grammar compiler alone, ~1.7 CPU-s and ~210 MB less
    if not args.grammar_warmup:  # (the warm-up loads it at start)
        try:
            check_layout()  # under 5 ms: a moved xgrammar internal fails the start, not the first grammar request
        except XGrammarLayoutError as exc:
            gc.enable()
            print(f"gateway: startup failed: {exc}", file=sys.stderr)
            return 1
    from gateway.api.response_store import RedisStore
    from gateway.app import create_app
    from gateway.observability.tracing_setup import TracingUnavailable, start_tracing
    from gateway.process.draining import DrainingServer, DrainState
    from gateway.process.launch import import_xgrammar, start_models, warm_grammars
    from gateway.process.policy_gate import policy_gate

    try:
        tracing = start_tracing(config.tracing)
    except TracingUnavailable as exc:
        gc.enable()
        print(f"gateway: {exc}", file=sys.stderr)
        return 2
    importing = threading.Thread(target=import_xgrammar, name="grammar-warmup")  # an exit waits for its import
    if args.grammar_warmup:
        importing.start()  # beside the models' start (tokenizers, a worker loading its weights)
    with ExitStack() as stack:  # stops the workers on every way out
        stack.callback(gc.enable)  # a start that fails (a caller in the same process keeps its collection)
        if tracing is not None:
            stack.callback(tracing.shutdown)  # the spans still queued go out
        try:
            registry = start_models(config, stack, role.worker_urls if role else None)
        except (RuntimeError, ValueError, OSError) as exc:
            print(f"gateway: startup failed: {exc}", file=sys.stderr)
            return 1
        if args.grammar_warmup:
            importing.join()
            try:
                warm_grammars(registry)
            except XGrammarLayoutError as exc:
                print(f"gateway: startup failed: {exc}", file=sys.stderr)
                return 1
        redis_options = redis_client_options(args)
        lock = role.lines_lock if role else None
        process = (role.index, role.count) if role else (0, 1)  # its share of each model's fair queue
        gate = (
            policy_gate(args.policies, args.redis, args.audit_log, config, redis_options, lock, process)
            if args.policies
            else None
        )
        gc.collect()
        gc.freeze()  # the tokenizers and tables loaded above: full collections need not walk them again
        gc.enable()
        print(
            f"gateway: serving {', '.join(m.id for m in registry)} on http://{args.host}:{args.port}/v1",
            file=sys.stderr,
            flush=True,
        )
        drain = DrainState()
        limits = config.server
        app = create_app(
            registry,
            drain=drain,
            gate=gate,
            response_store=RedisStore(args.redis, **redis_options) if args.redis else None,
            max_body_bytes=limits.max_body_bytes,
            max_concurrency=limits.max_concurrency,
            metrics_sockets=(role.metrics_socket(), role.sibling_sockets()) if role else None,
            tracing=tracing,
        )
        DrainingServer(uvicorn_config(app, args, limits), drain, args.drain_delay).run(
            sockets=[role.listening_socket()] if role else None
        )
    return 0


def _serve_group(config: GatewayConfig, args: argparse.Namespace, argv: list[str]) -> int:
    """`--workers N`: the port and the bundled workers here, N gateway processes as children."""
    import asyncio

    from gateway.process.group import ProcessGroup, exit_after_drain_s, listen
    from gateway.process.launch import start_workers

    if not args.redis:
        print(
            "gateway: warning: without --redis each gateway process keeps its own stored Responses "
            "(previous_response_id finds only those of the process that answers)",
            file=sys.stderr,
        )
    with ExitStack() as stack:
        try:
            sockets = listen(args.host, args.port, config.server.workers)
            worker_urls, supervisors = start_workers(config, stack)
        except (RuntimeError, OSError) as exc:
            print(f"gateway: startup failed: {exc}", file=sys.stderr)
            return 1
        stop_after_s = args.drain_delay + args.drain_timeout + exit_after_drain_s(args.redis_timeout)
        group = ProcessGroup(argv, sockets, worker_urls, stop_after_s)
        return asyncio.run(group.run(supervisors))


if __name__ == "__main__":
    sys.exit(main())
