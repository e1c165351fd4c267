"""What tracing costs per request: in process, a simulated chat request's hooks with tracing off and through the
tracing middleware with tracing on; and through HTTP three gateways side by side in one run: off (no endpoint), on (spans exported over OTLP/HTTP to a local receiver) and on but sampled out
(OTEL_TRACES_SAMPLER=always_off: the hooks and non-recording spans, nothing exported).

Starts `bench/fast_backend.py` (unpaced), the OTLP receiver of the tests (`tests/gateway/otlp_receiver.py`, its own
process) and the three `gateway serve` processes on that backend; one client sends non-streamed 1-token chat
requests one at a time on kept-alive connections, rotating over the gateways, and reports each side's latency and
the CPU its process spent per request (all its threads: the span processor's export thread included).

    python bench/tracing_bench.py [--requests 2000] [--warmup 200]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from pathlib import Path

import httpx
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from starlette.types import ASGIApp, Receive, Scope, Send

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.base import Backend, GenerateChunk, GenerateRequest, SamplingParams
from bench.overhead_bench import CONFIG, MODEL, _ready_port, cpu_seconds, gateways, machine, process, stand_in
from bench.policy_http_bench import percentile, request_ms
from gateway.observability import tracing
from gateway.observability.spans import TracingMiddleware
from gateway.validation.fields import GenerationSettings

SIDES = {
    "off": [],
    "on (exported)": ["--otlp-endpoint", "{receiver}"],
    "on, sampled out": ["--otlp-endpoint", "{receiver}"],
}
ENV = {"on, sampled out": {"OTEL_TRACES_SAMPLER": "always_off"}}


class _OneChunk(Backend):
    """A backend that answers every request with one finished chunk, at once."""

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        yield GenerateChunk([7], finish_reason="stop")

    async def ready(self) -> bool:
        return True


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _chat_stages(hooked: bool = True) -> ASGIApp:
    """An ASGI app that calls every tracing hook a chat request calls, in order, around a one-chunk backend
    (`hooked` False: the same work without the hooks)."""
    backend = _OneChunk()
    request = GenerateRequest("r", [1], SamplingParams(max_new_tokens=1))
    settings = GenerationSettings()

    class Door:
        def step(self, index: int, step: object) -> list[object]:
            return []

    async def bare(scope: Scope, receive: Receive, send: Send) -> None:
        door = Door()
        async with aclosing(backend.generate(request)) as chunks:
            async for chunk in chunks:
                door.step(0, chunk)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        with tracing.stage("gateway.render"):
            pass
        with tracing.stage("gateway.grammar"):
            pass
        tracing.note_request("chat", "chatcmpl-x", MODEL, 1, settings)
        with tracing.stage("gateway.admission"):
            pass
        door = tracing.traced_door(Door())
        async with aclosing(tracing.backend_stream(backend, request)) as chunks:
            tracing.note_replica("http://127.0.0.1:9")
            async for chunk in chunks:
                door.step(0, chunk)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    return app if hooked else bare


def in_process_us(rounds: int) -> dict[str, float]:
    """CPU microseconds of the event loop's thread per simulated chat request: the hooks alone (tracing off), and through the
    tracing middleware with spans recorded (queued for a batch processor whose exporter drops them)."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Drop()))
    stages = _chat_stages()
    apps = {
        "no hooks": _chat_stages(hooked=False),
        "off": stages,
        "on (recorded)": TracingMiddleware(stages, provider.get_tracer("bench")),
    }
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "scheme": "http", "headers": []}

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    async def send(message: dict) -> None:
        pass

    async def run(app: ASGIApp) -> float:
        started = time.thread_time()  # CPU of this thread only: other processes' load does not count
        for _ in range(rounds):
            await app(dict(scope), receive, send)
        return (time.thread_time() - started) / rounds * 1e6

    try:
        return {name: min(asyncio.run(run(app)) for _ in range(3)) for name, app in apps.items()}
    finally:
        provider.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="requests per gateway")
    parser.add_argument("--warmup", type=int, default=200, help="requests per gateway before measuring")
    parser.add_argument("--rounds", type=int, default=20000, help="simulated requests per in-process measure")
    args = parser.parse_args()
    print(machine(), flush=True)
    print("\nin process, event-loop CPU time per simulated chat request (every hook, a one-chunk backend):")
    for name, us in in_process_us(args.rounds).items():
        print(f"  {name:<14} {us:8.1f} µs", flush=True)
    with tempfile.TemporaryDirectory(prefix="tracing-bench-") as tmp:
        logs = Path(tmp)
        with (
            stand_in(logs, 0) as (_, standin_port),
            process([sys.executable, "-m", "tests.gateway.otlp_receiver"], logs / "receiver.log") as receiver,
        ):
            backend = f"http://127.0.0.1:{standin_port}"
            collector = f"http://127.0.0.1:{_ready_port(logs / 'receiver.log', receiver)}"
            config = logs / "gateway.yaml"
            config.write_text(CONFIG.format(model=MODEL, url=backend))
            sides = {name: [word.format(receiver=collector) for word in extra] for name, extra in SIDES.items()}
            with gateways(config, sides, logs, ENV) as running:
                ports = {name: port for name, (port, _) in running.items()}
                samples, cpu = measure(ports, {name: proc.pid for name, (_, proc) in running.items()}, args)
                report(samples, cpu)
                print(f"spans received by the collector: {httpx.get(collector + '/received').text}")


def measure(
    ports: dict[str, int], pids: dict[str, int], args: argparse.Namespace
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Latencies (ms) per side, and each gateway's CPU milliseconds per measured request."""
    connections = {name: http.client.HTTPConnection("127.0.0.1", port) for name, port in ports.items()}
    headers = {"content-type": "application/json"}
    samples: dict[str, list[float]] = {name: [] for name in ports}
    for _ in range(args.warmup):
        for connection in connections.values():
            request_ms(connection, headers)
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    for _ in range(args.requests):
        for name, connection in connections.items():
            samples[name].append(request_ms(connection, headers))
    cpu = {name: (cpu_seconds(pid) - before[name]) / args.requests * 1000 for name, pid in pids.items()}
    return samples, cpu


def report(samples: dict[str, list[float]], cpu: dict[str, float]) -> None:
    base = samples["off"]
    base_p50, base_p99 = percentile(base, 0.5), percentile(base, 0.99)
    print(f"\n{len(base)} requests per gateway (1-token chat, one at a time, kept-alive connection)\n")
    header = f"{'gateway':<18} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'added p50':>10} {'added p99':>10}"
    print(f"{header} {'CPU ms/req':>11} {'added CPU':>10}")
    for name, values in samples.items():
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        added = f"{'':>10} {'':>10}" if values is base else f"{p50 - base_p50:+10.3f} {p99 - base_p99:+10.3f}"
        added_cpu = "" if values is base else f"{cpu[name] - cpu['off']:+10.3f}"
        print(f"{name:<18} {p50:8.3f} {p99:8.3f} {statistics.fmean(values):8.3f} {added} {cpu[name]:11.3f} {added_cpu}")
    print(f"\nload average {' '.join(Path('/proc/loadavg').read_text().split()[:3])} at the end")


if __name__ == "__main__":
    main()
