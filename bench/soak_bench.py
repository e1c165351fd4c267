"""Soak: many streaming clients for minutes through the gateway, a quarter hanging up mid-stream; then idle.

Two phases, real processes:

1. `bench/fast_backend.py` (SGLang's dialect, one decode step every --interval-ms) behind `gateway serve`:
   --clients concurrent clients for --seconds, each sending chat streams of --tokens tokens one after another
   on fresh connections; every fourth client hangs up after a random number of tokens, then asks again.
2. The embedded model on its bundled worker behind `gateway serve` (default configuration): --worker-clients
   clients for --worker-seconds, --worker-tokens tokens each, a quarter hanging up the same way.

Reported per phase: requests, finished streams, hang-ups and errors (any non-200, error event, or finished stream
without `[DONE]`; each kind with an example), TTFT and inter-token latency p50/p99 (from writing the request to
the first content delta; between consecutive content deltas), the gateway's RSS, open fds, asyncio tasks
(`gateway:event_loop_tasks`) and CLOSE-WAIT sockets (`ss`) after warm-up, at the end of the load and after
--idle seconds of idle (longer than the backends' 5 s keep-alive), CPU used by the gateway, the backend and this
client, and, on the worker, `vllm:num_requests_running` after the idle (every hung-up stream's slot freed).

    python bench/soak_bench.py [--clients 500] [--seconds 300] [--tokens 64] [--interval-ms 50]
                               [--worker-clients 8] [--worker-seconds 120] [--worker-tokens 32] [--idle 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead_bench import (
    chat_body,
    cpu_seconds,
    free_port,
    gateway_on_stand_in,
    machine,
    percentile,
    process,
    serve_cmd,
    wait_ready,
)

HANG_UP_EVERY = 4
"""Every fourth client hangs up mid-stream."""
WARM_UP_S = 15.0
_WORKER_URL = re.compile(r"worker ready at (http://\S+)")


@dataclass
class Tally:
    """What the clients of one phase saw."""

    requests: int = 0
    finished: int = 0
    hung_up: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    ttft: array = field(default_factory=lambda: array("d"))
    gaps: array = field(default_factory=lambda: array("d"))

    def error(self, kind: str, example: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1
        self.examples.setdefault(kind, example[:600])


@dataclass
class Snapshot:
    """The gateway process at one moment."""

    rss_mib: float
    fds: int
    fd_kinds: dict[str, int]
    """fds by what they are: socket, pipe, anon_inode, file."""
    tasks: float
    close_wait: int
    close_wait_sockets: list[str]
    """local and peer address of each socket in CLOSE-WAIT."""


def snapshot(pid: int, port: int) -> Snapshot:
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kib = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    kinds: dict[str, int] = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        kind = target.split(":", 1)[0] if ":" in target else "file"
        kinds[kind] = kinds.get(kind, 0) + 1
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    tasks = next(
        (float(line.split()[1]) for line in metrics.splitlines() if line.startswith("gateway:event_loop_tasks ")),
        float("nan"),
    )
    ss = subprocess.run(["ss", "-tanpH", "state", "close-wait"], capture_output=True, text=True, check=False).stdout
    close_wait = [" ".join(line.split()[2:4]) for line in ss.splitlines() if f"pid={pid}," in line]
    return Snapshot(rss_kib / 1024, sum(kinds.values()), kinds, tasks, len(close_wait), close_wait)


async def one_stream(port: int, body: bytes, hang_up_after: int | None, tally: Tally) -> None:
    """One chat stream on a fresh connection: TTFT and gaps between content deltas; hang up after
    `hang_up_after` content deltas when given."""
    tally.requests += 1
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    except OSError as e:
        tally.error("connect", repr(e))
        return
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode()
    try:
        start = time.perf_counter()
        writer.write(head + body)
        headers = await reader.readuntil(b"\r\n\r\n")
        if not headers.startswith(b"HTTP/1.1 200"):
            tally.error(
                f"status {headers[9:12].decode()}", (headers + await reader.read(300)).decode("utf-8", "replace")
            )
            return
        last, deltas, pending, done = None, 0, b"", False
        while size := int((await reader.readline()).split(b";")[0], 16):
            pending += (await reader.readexactly(size + 2))[:-2]
            *events, pending = pending.split(b"\n\n")
            for event in events:
                if event == b"data: [DONE]":
                    done = True
                    continue
                parsed = orjson.loads(event[6:])
                if "error" in parsed:
                    tally.error("error event", event.decode("utf-8", "replace"))
                    return
                if not any(c.get("delta", {}).get("content") for c in parsed.get("choices") or ()):
                    continue
                now = time.perf_counter()
                if last is None:
                    tally.ttft.append(now - start)
                else:
                    tally.gaps.append(now - last)
                last, deltas = now, deltas + 1
                if hang_up_after is not None and deltas >= hang_up_after:
                    tally.hung_up += 1
                    return
        if done:
            tally.finished += 1
        else:
            tally.error("no [DONE]", pending.decode("utf-8", "replace"))
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        tally.error(type(e).__name__, repr(e))
    finally:
        writer.close()


async def client(n: int, port: int, tokens: int, until: float, tally: Tally) -> None:
    rng = random.Random(n)
    body = chat_body(tokens, usage=False)
    while time.monotonic() < until:
        hang_up = rng.randint(1, max(1, tokens // 2)) if n % HANG_UP_EVERY == 0 else None
        await one_stream(port, body, hang_up, tally)


async def load(port: int, clients: int, tokens: int, seconds: float, pid: int) -> tuple[Tally, dict[str, Snapshot]]:
    """`clients` clients for `seconds`; snapshots before, after the warm-up and when the load ends."""
    before = await asyncio.to_thread(snapshot, pid, port)
    tally = Tally()
    until = time.monotonic() + seconds
    tasks = [asyncio.create_task(client(n, port, tokens, until, tally)) for n in range(clients)]
    await asyncio.sleep(min(WARM_UP_S, seconds / 4))
    warm = await asyncio.to_thread(snapshot, pid, port)
    await asyncio.gather(*tasks)
    return tally, {"before": before, "warm": warm, "end": await asyncio.to_thread(snapshot, pid, port)}


@dataclass
class PhaseResult:
    name: str
    clients: int
    seconds: float
    tally: Tally
    snapshots: dict[str, Snapshot]
    cpu: dict[str, float]
    worker_running: float | None = None


def run_phase(
    name: str, gateway_pid: int, port: int, backend_pid: int, clients: int, tokens: int, seconds: float, idle: float
) -> PhaseResult:
    pids = {"gateway": gateway_pid, "backend": backend_pid, "client": os.getpid(), "machine": None}
    before = {k: cpu_seconds(p) for k, p in pids.items()}
    tally, snapshots = asyncio.run(load(port, clients, tokens, seconds, gateway_pid))
    cpu = {k: cpu_seconds(p) - before[k] for k, p in pids.items()}
    time.sleep(idle)
    snapshots["idle"] = snapshot(gateway_pid, port)
    return PhaseResult(name, clients, seconds, tally, snapshots, cpu)


def worker_running(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:num_requests_running")
    )


def worker_pid(url: str) -> int:
    """The pid listening on the worker's port (for its CPU time)."""
    port = url.rsplit(":", 1)[1].strip("/")
    ss = subprocess.run(["ss", "-tlnpH", f"sport = :{port}"], capture_output=True, text=True, check=False).stdout
    return int(re.search(r"pid=(\d+)", ss).group(1))


def report(result: PhaseResult) -> None:
    t = result.tally
    ms = lambda values, q: f"{percentile(list(values), q) * 1000:.1f}" if values else "-"
    print(f"\n## {result.name}: {result.clients} clients x {result.seconds:.0f} s")
    print(f"requests {t.requests}, finished {t.finished}, hung up {t.hung_up}, errors {sum(t.errors.values())}")
    for kind, count in t.errors.items():
        print(f"  error {kind}: {count}, e.g. {t.examples[kind]!r}")
    print(
        f"TTFT ms p50 {ms(t.ttft, 50)} p99 {ms(t.ttft, 99)}; inter-token ms p50 {ms(t.gaps, 50)} p99 {ms(t.gaps, 99)}"
        f" ({len(t.gaps)} gaps)"
    )
    print("| gateway | RSS MiB | fds | asyncio tasks | CLOSE-WAIT |\n|---|---|---|---|---|")
    for when, s in result.snapshots.items():
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(s.fd_kinds.items()))
        print(f"| {when} | {s.rss_mib:.1f} | {s.fds} ({kinds}) | {s.tasks:.0f} | {s.close_wait} |")
    for when, s in result.snapshots.items():
        if s.close_wait_sockets:
            print(f"CLOSE-WAIT at {when} (local peer): {'; '.join(s.close_wait_sockets[:5])}")
    warm, end = result.snapshots["warm"], result.snapshots["end"]
    print(f"RSS growth warm → end: {(end.rss_mib / warm.rss_mib - 1) * 100:+.1f} %")
    cpu = result.cpu
    print(
        f"CPU cores used over the load: gateway {cpu['gateway'] / result.seconds:.2f}, backend "
        f"{cpu['backend'] / result.seconds:.2f}, client {cpu['client'] / result.seconds:.2f} "
        f"(/proc/stat: {cpu['machine'] / result.seconds:.2f} busy in all)"
    )
    if result.worker_running is not None:
        print(f"worker vllm:num_requests_running after the idle: {result.worker_running:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--interval-ms", type=float, default=50.0, help="the stand-in's decode step")
    parser.add_argument("--worker-clients", type=int, default=8)
    parser.add_argument("--worker-seconds", type=float, default=120.0, help="0: skip the worker phase")
    parser.add_argument("--worker-tokens", type=int, default=32)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds idle before the last snapshot")
    args = parser.parse_args()
    print(machine(), flush=True)
    with tempfile.TemporaryDirectory(prefix="soak-bench-") as tmp:
        logs = Path(tmp)
        if args.seconds > 0:
            report(stand_in_phase(args, logs))
        if args.worker_seconds > 0:
            report(worker_phase(args, logs))
    print(f"\nload average {' '.join(Path('/proc/loadavg').read_text().split()[:3])} at the end")


def stand_in_phase(args: argparse.Namespace, logs: Path) -> PhaseResult:
    with gateway_on_stand_in(logs, args.interval_ms) as (standin, gateway, port):
        print(f"stand-in phase: gateway pid {gateway.pid}, stand-in pid {standin.pid}", flush=True)
        return run_phase(
            "gateway → fast stand-in",
            gateway.pid,
            port,
            standin.pid,
            args.clients,
            args.tokens,
            args.seconds,
            args.idle,
        )


def worker_phase(args: argparse.Namespace, logs: Path) -> PhaseResult:
    port = free_port()
    cmd = serve_cmd(port, "--log-level", "warning")
    log = logs / "gateway-worker.log"
    with process(cmd, log) as gateway:
        wait_ready(f"http://127.0.0.1:{port}/ready", gateway, log, timeout=300)
        url = _WORKER_URL.search(log.read_text()).group(1)
        print(f"worker phase: gateway pid {gateway.pid}, worker at {url}", flush=True)
        result = run_phase(
            "gateway → embedded worker",
            gateway.pid,
            port,
            worker_pid(url),
            args.worker_clients,
            args.worker_tokens,
            args.worker_seconds,
            args.idle,
        )
        result.worker_running = worker_running(url)
        return result


if __name__ == "__main__":
    main()
