"""Policy overhead through HTTP: what authentication + admission + settlement (+ the audit line) add to one
request, in memory and with a local redis-server, side by side with the same requests on a gateway without
`--policies`, in one run.

Starts `bench/fast_backend.py` (unpaced), a `redis-server` on 127.0.0.1 and three `gateway serve` processes on
that backend: open, `--policies DIR` (memory) and `--policies DIR --redis URL`, each with one tenant whose
limits are high enough never to refuse. Then one client sends non-streamed 1-token chat requests one at a time
on a kept-alive connection, rotating over the three gateways so that load drifts touch all alike, and reports
each side's p50/p99 latency and the difference from the open gateway.

    python bench/policy_http_bench.py [--requests 3000]
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.overhead_bench import CONFIG, MESSAGES, MODEL, gateways, machine, stand_in
from tests.redis_server import RedisServer

KEY = "sk-bench-0123456789abcdef"
TENANT = f"""tenant: bench
keys:
  - id: bench-key
    sha256: {hashlib.sha256(KEY.encode()).hexdigest()}
models: ["{MODEL}"]
limits:
  requests_per_minute: 1000000000
  tokens_per_minute: 1000000000000
  concurrent_requests: 1000000
  tokens_per_day: 1000000000000000
  max_tokens: 4096
"""
BODY = orjson.dumps({"model": MODEL, "messages": MESSAGES, "max_tokens": 1, "temperature": 0.0, "ignore_eos": True})


def request_ms(connection: http.client.HTTPConnection, headers: dict[str, str]) -> float:
    started = time.perf_counter()
    connection.request("POST", "/v1/chat/completions", body=BODY, headers=headers)
    response = connection.getresponse()
    body = response.read()
    took = (time.perf_counter() - started) * 1000
    if response.status != 200:
        raise RuntimeError(f"{response.status}: {body[:300]!r}")
    return took


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000, help="requests per gateway")
    parser.add_argument("--warmup", type=int, default=200, help="requests per gateway before measuring")
    args = parser.parse_args()
    print(machine(), flush=True)
    with tempfile.TemporaryDirectory(prefix="policy-bench-") as tmp:
        logs = Path(tmp)
        policies = logs / "policies"
        policies.mkdir()
        (policies / "bench.yaml").write_text(TENANT)
        with (
            RedisServer(logs) as redis,
            stand_in(logs, 0) as (_, standin_port),
        ):
            backend = f"http://127.0.0.1:{standin_port}"
            config = logs / "gateway.yaml"
            config.write_text(CONFIG.format(model=MODEL, url=backend))
            sides = {
                "open (no --policies)": [],
                "--policies (memory)": ["--policies", str(policies), "--audit-log", str(logs / "audit-memory")],
                "--policies --redis": [
                    *("--policies", str(policies), "--redis", redis.url),
                    *("--audit-log", str(logs / "audit-redis")),
                ],
            }
            with gateways(config, sides, logs) as running:
                report(measure({name: port for name, (port, _) in running.items()}, args))


def measure(ports: dict[str, int], args: argparse.Namespace) -> dict[str, list[float]]:
    connections = {name: http.client.HTTPConnection("127.0.0.1", port) for name, port in ports.items()}
    headers = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}
    samples: dict[str, list[float]] = {name: [] for name in ports}
    for i in range(args.warmup + args.requests):
        for name, connection in connections.items():
            took = request_ms(connection, headers)
            if i >= args.warmup:
                samples[name].append(took)
    return samples


def report(samples: dict[str, list[float]]) -> None:
    base = samples["open (no --policies)"]
    base_p50, base_p99 = percentile(base, 0.5), percentile(base, 0.99)
    print(f"\n{len(base)} requests per gateway (1-token chat, one at a time, kept-alive connection)\n")
    print(f"{'gateway':<24} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'added p50':>10} {'added p99':>10}")
    for name, values in samples.items():
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        added = "" if values is base else f"{p50 - base_p50:+10.3f} {p99 - base_p99:+10.3f}"
        print(f"{name:<24} {p50:8.3f} {p99:8.3f} {statistics.fmean(values):8.3f} {added}")
    print(f"\nload average {' '.join(Path('/proc/loadavg').read_text().split()[:3])} at the end")


if __name__ == "__main__":
    main()
