"""What tracing costs per request: the hooks with tracing off (in process), and through HTTP three gateways side by
side in one run: off (no endpoint), on (spans exported over OTLP/HTTP to a local receiver) and on but sampled out
(OTEL_TRACES_SAMPLER=always_off: the hooks and non-recording spans, nothing exported).

Starts `bench/fast_backend.py` (unpaced), the OTLP receiver of the tests (`tests/gateway/otlp_receiver.py`, its own
process) and the three `gateway serve` processes on that backend; one client sends non-streamed 1-token chat
requests one at a time on kept-alive connections, rotating over the gateways, and reports each side's latency and
the CPU its process spent per request (all its threads: the span processor's export thread included).

    python bench/tracing_bench.py [--requests 2000] [--warmup 200]
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import tempfile
import timeit
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.base import GenerateRequest, SamplingParams
from backends.sglang import SGLangBackend
from bench.overhead_bench import CONFIG, MODEL, _ready_port, cpu_seconds, free_port, machine, process, wait_ready
from bench.policy_http_bench import percentile, request_ms
from gateway.observability import tracing
from gateway.validation.fields import GenerationSettings

SIDES = {
    "off": [],
    "on (exported)": ["--otlp-endpoint", "{receiver}"],
    "on, sampled out": ["--otlp-endpoint", "{receiver}"],
}
ENV = {"on, sampled out": ["env", "OTEL_TRACES_SAMPLER=always_off"]}


def hooks_off_ns(rounds: int) -> float:
    """Nanoseconds per request of every tracing hook a chat request calls, with tracing off."""
    backend = SGLangBackend("http://127.0.0.1:9")
    request = GenerateRequest("r", [1], SamplingParams(max_new_tokens=1))
    settings = GenerationSettings()
    door = object()

    def one_request() -> None:
        with tracing.stage("gateway.render"):
            pass
        with tracing.stage("gateway.grammar"):
            pass
        tracing.note_request("chat", "chatcmpl-x", MODEL, 1, settings)
        with tracing.stage("gateway.admission"):
            pass
        tracing.backend_stream(backend, request).aclose().close()  # the stream the backend call makes anyway
        tracing.note_replica("http://127.0.0.1:9")
        tracing.traced_door(door)

    def baseline() -> None:
        backend.generate(request).aclose().close()

    hooked = min(timeit.repeat(one_request, number=rounds, repeat=5))
    bare = min(timeit.repeat(baseline, number=rounds, repeat=5))
    return (hooked - bare) / rounds * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="requests per gateway")
    parser.add_argument("--warmup", type=int, default=200, help="requests per gateway before measuring")
    args = parser.parse_args()
    print(machine(), flush=True)
    print(f"\ntracing hooks with tracing off: {hooks_off_ns(200_000):.0f} ns per chat request (in process)", flush=True)
    with tempfile.TemporaryDirectory(prefix="tracing-bench-") as tmp:
        logs = Path(tmp)
        with (
            process([sys.executable, "bench/fast_backend.py", "--interval-ms", "0"], logs / "stand-in.log") as standin,
            process([sys.executable, "-m", "tests.gateway.otlp_receiver"], logs / "receiver.log") as receiver,
        ):
            backend = f"http://127.0.0.1:{_ready_port(logs / 'stand-in.log', standin)}"
            collector = f"http://127.0.0.1:{_ready_port(logs / 'receiver.log', receiver)}"
            config = logs / "gateway.yaml"
            config.write_text(CONFIG.format(model=MODEL, url=backend))
            ports = {name: free_port() for name in SIDES}
            procs = []
            for name, extra in SIDES.items():
                cmd = [sys.executable, "-m", "gateway.cli", "serve", "--port", str(ports[name]), "--config", str(config)]
                extra = [word.format(receiver=collector) for word in extra]
                procs.append(process([*ENV.get(name, []), *cmd, *extra], logs / f"gateway-{ports[name]}.log"))
            running = [p.__enter__() for p in procs]
            try:
                for name, proc in zip(SIDES, running):
                    wait_ready(f"http://127.0.0.1:{ports[name]}/ready", proc, logs / f"gateway-{ports[name]}.log")
                samples, cpu = measure(ports, {name: proc.pid for name, proc in zip(SIDES, running)}, args)
                report(samples, cpu)
                print(f"spans received by the collector: {httpx.get(collector + '/received').text}")
            finally:
                for p in reversed(procs):
                    p.__exit__(None, None, None)


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
