"""`python -m backends.worker`: load a model, serve SGLang's /generate, print `READY <port>` when listening."""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import socket
import sys
import time
from collections.abc import Callable

from backends.worker import passive_waits  # noqa: F401  # isort: skip (before torch: libgomp reads its wait policy once)
from backends.worker import start_collection  # noqa: F401  # isort: skip (before torch: no collection while starting)

import torch
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from backends.checkpoint import embedded_gguf_path, load_checkpoint
from backends.client_timeouts import (
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_WAITING_HEADS,
    DEFAULT_SEND_TIMEOUT_S,
    client_timeout_protocol,
)
from backends.compile_pool import DEFAULT_GRAMMAR_COMPILE_S
from backends.worker.cpu_features import cpu_features, weights_dtype_refusal
from backends.worker.cuda_graphs import CudaGraphDecoder
from backends.worker.engine import Engine
from backends.worker.grammar import GrammarCache, tokenizer_info
from backends.worker.model import LlamaModel, layer_products
from backends.worker.prefill_gemm import PrefillGemm, choose_prefill_gemm
from backends.worker.server import WorkerState, build_app
from backends.worker.threads import ThreadTuner, describe_cpus, parse_threads, usable_cores
from backends.worker.weights import LlamaWeights, load_weights
from backends.xgrammar_core import XGrammarLayoutError, without_transformers, xgrammar


def at_least(least: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `least` (0 slots, chunk tokens or context never serve a request: a start-up
    refusal, not a worker that hangs or fails every request)."""

    def integer(text: str) -> int:
        if not text.lstrip("-").isdigit() or int(text) < least:
            raise argparse.ArgumentTypeError(f"must be an integer >= {least}, got {text!r}")
        return int(text)

    return integer


BODY_MIN_RATE = 1024 * 1024
"""Bytes a second a request body must average past its grace: the worker's clients (the gateway, a router) send
from memory over the cluster's network; a 64 MiB body may take 64 s and the grace."""


def positive(text: str) -> float:
    """An argparse type: a finite number > 0 (a header timeout or body rate of 0 would refuse every request)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds >= 0 (a negative or NaN drain timeout is a start-up refusal)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m backends.worker", description=__doc__)
    parser.add_argument("--model", help="GGUF file or Hugging Face Llama directory (default: the embedded model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--threads",
        type=parse_threads,
        default=None,
        help="torch CPU threads of the engine, or auto (the default): all usable cores (the CPU affinity, capped by a "
        "cgroup CPU quota), or one where decode steps measure clearly faster with one, at start-up and again while "
        "serving",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--max-batch", type=at_least(1), default=8, help="KV cache slots: requests decoded together")
    parser.add_argument("--context-length", type=at_least(1), help="tokens per slot (default: the model's)")
    parser.add_argument(
        "--max-waiting", type=at_least(0), default=64, help="requests waiting for a slot; past it a 503 (default: 64)"
    )
    parser.add_argument("--prefill-chunk", type=at_least(1), default=256, help="prompt tokens per prefill step")
    parser.add_argument("--weights-dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument(
        "--prefill-gemm",
        choices=["auto", "onednn", "aten"],
        default="auto",
        help="what multiplies the many rows of a prefill on CPU with fp32 weights: auto (the default) times one "
        "layer both ways at start-up and gives ATen the row counts it clearly wins (keeping float32 weights beside "
        "oneDNN's packed ones); onednn: packed weights for every product; aten: ATen from 64 rows",
    )
    parser.add_argument(
        "--cuda-graphs",
        choices=["auto", "off"],
        default="auto",
        help="decode steps as CUDA graphs, one per batch width (powers of two up to --max-batch) and key length "
        "(powers of two from 32 up to the context), each checked against the eager step at start-up (any error or "
        "mismatch: all off, said in the log): auto (the default) on with --device cuda, off elsewhere; off: every "
        "step eager. /get_server_info and /metrics say which path runs",
    )
    parser.add_argument(
        "--prefix-cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep each request's KV for later prompts that share its prefix (default: on)",
    )
    parser.add_argument(
        "--disable-radix-cache", dest="prefix_cache", action="store_false", help="SGLang's name of --no-prefix-cache"
    )
    parser.add_argument(
        "--drain-timeout",
        type=seconds,
        default=2.0,
        help="on SIGTERM the listener closes at once and requests in flight get this many seconds to finish "
        "(default: 2; a pod being replaced wants its streams' length)",
    )
    parser.add_argument(
        "--header-timeout",
        type=positive,
        default=DEFAULT_HEADER_TIMEOUT_S,
        metavar="SECONDS",
        help="seconds a request's line and headers may take to arrive (slow-loris: the connection is closed); also "
        f"the longest pause inside a body and the grace before --body-min-rate counts (default: "
        f"{DEFAULT_HEADER_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--body-min-rate",
        type=positive,
        default=BODY_MIN_RATE,
        metavar="BYTES",
        help="bytes a second a request body must average once the header timeout has passed since its headers; a "
        f"slower one is cut off, however often it sends a byte (default: {BODY_MIN_RATE})",
    )
    parser.add_argument(
        "--send-timeout",
        type=positive,
        default=DEFAULT_SEND_TIMEOUT_S,
        metavar="SECONDS",
        help="seconds a client may take no bytes of its answer (its socket full) before it is cut off and its "
        f"request aborted, freeing its slot (default: {DEFAULT_SEND_TIMEOUT_S:g}, as the gateway's)",
    )
    parser.add_argument(
        "--max-waiting-heads",
        type=at_least(1),
        default=DEFAULT_MAX_WAITING_HEADS,
        metavar="N",
        help="connections that may wait for a request's head at once (idle kept-alive ones, slow heads); past it "
        f"the one waiting longest is closed (default: {DEFAULT_MAX_WAITING_HEADS})",
    )
    parser.add_argument(
        "--grammar-compile-budget",
        type=seconds,
        default=DEFAULT_GRAMMAR_COMPILE_S,
        metavar="SECONDS",
        help="CPU seconds a request's grammar (json_schema, regex, ebnf, structural_tag) may cost to compile, in a "
        f"child process killed past it: a 400 (default: {DEFAULT_GRAMMAR_COMPILE_S:g}, as the gateway's; 0: no "
        "budget, grammars compile in the worker's own process)",
    )
    return parser.parse_args(argv)


def progress(message: str) -> None:
    print(f"[worker] {message}", file=sys.stderr, flush=True)


def build_state(args: argparse.Namespace) -> WorkerState:
    """Load checkpoint, weights, model, grammar compiler, and start the engine thread."""
    began = time.perf_counter()
    path = args.model or str(embedded_gguf_path())
    xgrammar()  # before the weights: an xgrammar whose layout moved fails the start at once (XGrammarLayoutError)
    progress(f"loading {path}")
    tuner, threads = choose_threads(args.threads, torch.device(args.device))
    checkpoint = load_checkpoint(path)
    weights = load_weights(checkpoint, progress)
    context = min(args.context_length or checkpoint.config.context_length, checkpoint.config.context_length)
    gemm = prefill_gemm(args, weights)
    model = LlamaModel(
        weights,
        checkpoint.config,
        slots=args.max_batch,
        context=context,
        device=args.device,
        weights_dtype=args.weights_dtype,
        aten_from=gemm.aten_from,
    )
    del weights
    if args.device == "cpu" and args.weights_dtype == "fp32":
        progress(gemm.describe(model.plain_weight_bytes / 1e6))
    grammars = GrammarCache(tokenizer_info(checkpoint, model.vocab_size), budget_s=args.grammar_compile_budget or None)
    engine = Engine(
        model,
        checkpoint.eos_token_ids,
        prefill_chunk=args.prefill_chunk,
        prefix_cache=args.prefix_cache,
        tuner=tuner,
        threads=threads,
        decoder=CudaGraphDecoder(model) if args.device == "cuda" and args.cuda_graphs == "auto" else None,
    )
    engine.start()
    threads_said = f"threads auto (now {engine.threads})" if tuner is not None else f"{engine.threads} threads"
    progress(
        f"model ready in {time.perf_counter() - began:.1f}s ({args.device}, {threads_said}, "
        f"{args.weights_dtype} weights, {args.max_batch} slots x {context} tokens, "
        f"prefix cache {'on' if args.prefix_cache else 'off'}, CUDA graphs {engine.decode_path()}, "
        f"greedy head {model.greedy_head.describe() if model.greedy_head is not None else 'off: full float32 logits'})"
    )
    return WorkerState(checkpoint, engine, grammars, path, max_waiting=args.max_waiting)


def prefill_gemm(args: argparse.Namespace, weights: LlamaWeights) -> PrefillGemm:
    """`--prefill-gemm` for float32 weights packed for oneDNN (CPU); oneDNN (nothing to choose) elsewhere."""
    if args.device != "cpu" or args.weights_dtype != "fp32" or not torch.backends.mkldnn.is_available():
        return PrefillGemm(None, {})
    return choose_prefill_gemm(args.prefill_gemm, layer_products(weights.layers[0]), args.prefill_chunk)


def choose_threads(threads: int | None, device: torch.device) -> tuple[ThreadTuner | None, int]:
    """The engine thread's torch thread count: `--threads N`, or for auto (None) on a CPU with several usable
    cores, the tuner that measures on the engine thread when it starts (the count until then: all usable cores)."""
    usable = usable_cores()
    if threads is not None or device.type != "cpu" or usable == 1:
        return None, threads or usable
    return ThreadTuner(usable, usable, progress, start_up=True), usable


def client_protocol(args: argparse.Namespace) -> type[HttpToolsProtocol]:
    """uvicorn's HTTP protocol bounding clients as the flags say (backends/client_timeouts.py)."""
    return client_timeout_protocol(args.header_timeout, args.send_timeout, args.body_min_rate, args.max_waiting_heads)


async def serve(
    state: WorkerState, host: str, port: int, http: type[HttpToolsProtocol], drain_timeout: float = 2.0
) -> None:
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on TCP-protocol sockets, and Nagle's algorithm
    # holds small stream events back ~40 ms on a kept-alive connection
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    config = uvicorn.Config(
        build_app(state),
        log_level="warning",
        timeout_graceful_shutdown=drain_timeout,
        http=http,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if server.started:
        print(f"READY {sock.getsockname()[1]}", flush=True)
    await task


def refuse_unsupported_dtype(args: argparse.Namespace) -> None:
    """Before loading anything: exit 2 with one line when the device asked for is absent, or the CPU cannot run
    the weights dtype asked for."""
    if args.device == "cuda" and not torch.cuda.is_available():
        progress(f"error: --device cuda: this torch ({torch.__version__}) sees no CUDA device. Use --device cpu.")
        raise SystemExit(2)
    if args.device != "cpu":
        return
    features = cpu_features()
    progress(f"CPU {features.describe()} (torch dispatch {torch.backends.cpu.get_cpu_capability()}; {describe_cpus()})")
    refusal = weights_dtype_refusal(args.weights_dtype, args.device, features)
    if refusal is not None:
        progress(f"error: {refusal}")
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # The decode steps run on the engine thread, at the count it sets there. While another thread that ran
    # multi-threaded torch work (loading, here) keeps its own OpenMP team, the engine thread's steps measured ~30 %
    # slower (2 cores, 2 threads: 42-46 against 32-34 ms a batch-1 step): this thread works on one.
    torch.set_num_threads(1)
    refuse_unsupported_dtype(args)
    without_transformers()  # xgrammar's compiler and matcher, not its Hugging Face adapters: ~0.44 CPU-s, ~24 MB less
    try:
        state = build_state(args)
    except XGrammarLayoutError as exc:
        progress(f"error: startup failed: {exc}")
        raise SystemExit(1) from None
    gc.collect()
    gc.freeze()  # what loading left: full collections need not walk it while serving
    gc.enable()  # off while starting (backends/worker/start_collection.py)
    try:
        asyncio.run(serve(state, args.host, args.port, client_protocol(args), args.drain_timeout))
    finally:
        state.engine.stop()
        state.grammars.close()


if __name__ == "__main__":
    main()
