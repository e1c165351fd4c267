"""The `gateway` command."""

from __future__ import annotations

import argparse
import gc
import signal
import sys
from contextlib import ExitStack
from pathlib import Path

from gateway.observability.access_log import LEVELS, configure_logging
from gateway.process.config import BackendConfig, ConfigError, GatewayConfig, ModelEntry, default_config, load_config
from gateway.process.limits import ServerLimits


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = _serve_config(args)
    except ConfigError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    override_limits(config.server, args)
    return _serve(config, args.host, args.port, args.drain_delay, args.drain_timeout)


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
    serve.add_argument("--family", default="hermes", help="model family of --model (default: hermes)")
    serve.add_argument(
        "--backend-url",
        action="append",
        help="serve through this SGLang server instead of a bundled worker (repeat it for replicas)",
    )
    serve.add_argument(
        "--request-timeout", type=_positive, default=600.0, help="deadline of one request in seconds (default: 600)"
    )
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
    serve.add_argument("--threads", type=int, help="CPU threads of the bundled worker")
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
        "--header-timeout", type=_positive, help="seconds a request's headers may take to arrive (default: 10)"
    )
    serve.add_argument(
        "--log-level",
        choices=LEVELS,
        default="info",
        help="log level; at info and below every request writes one JSON access line (default: info)",
    )
    return parser


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


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number >= 0")
    return value


def _serve_config(args: argparse.Namespace) -> GatewayConfig:
    if args.config:
        if args.model or args.backend_url:
            raise ConfigError("--config cannot be combined with --model or --backend-url")
        return load_config(args.config)
    config = default_config()
    entry = config.models[0]
    if args.model:
        if not args.model.exists():
            raise ConfigError(f"--model: {args.model} does not exist")
        entry = ModelEntry(id=args.model_id or args.model.stem, family=args.family, checkpoint=args.model.resolve())
    elif args.model_id:
        entry.id = args.model_id
    entry.family = args.family
    if args.default_max_tokens is not None or args.model:
        entry.default_max_tokens = args.default_max_tokens
    entry.backend = (
        BackendConfig(type="sglang", urls=args.backend_url) if args.backend_url else BackendConfig(threads=args.threads)
    )
    entry.backend.request_timeout_s = args.request_timeout
    return GatewayConfig(models=[entry])


def _stop(signum: int, frame: object) -> None:
    """SIGTERM / SIGINT outside uvicorn (while loading, or re-raised by uvicorn after its drain)."""
    raise SystemExit(0)


def _serve(config: GatewayConfig, host: str, port: int, drain_delay: float, drain_timeout: float) -> int:
    import uvicorn

    from gateway.app import create_app
    from gateway.process.draining import DrainingServer, DrainState
    from gateway.process.header_timeout import header_timeout_protocol
    from gateway.process.launch import start_models

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    with ExitStack() as stack:  # stops the workers on every way out
        try:
            registry = start_models(config, stack)
        except (RuntimeError, ValueError, OSError) as exc:
            print(f"gateway: startup failed: {exc}", file=sys.stderr)
            return 1
        gc.collect()
        gc.freeze()  # the tokenizers and tables loaded above: full collections need not walk them again
        print(
            f"gateway: serving {', '.join(m.id for m in registry)} on http://{host}:{port}/v1",
            file=sys.stderr,
            flush=True,
        )
        drain = DrainState()
        limits = config.server
        app = create_app(
            registry, drain=drain, max_body_bytes=limits.max_body_bytes, max_concurrency=limits.max_concurrency
        )
        server_config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", access_log=False, log_config=None,
            timeout_graceful_shutdown=drain_timeout, http=header_timeout_protocol(limits.header_timeout_s),
        )
        DrainingServer(server_config, drain, drain_delay).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
