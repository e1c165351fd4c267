"""Gateway overhead: the same streaming load sent straight to a fast stand-in backend and through the gateway.

Starts two real processes: `bench/fast_backend.py` (SGLang's `/generate` dialect, real SmolLM2 ids,
one decode step every --interval-ms) and `gateway serve` in front of it (an `sglang` backend in
incremental mode). One client (this process: raw asyncio HTTP/1.1, the same code for both paths)
then runs, per round, both phases in alternating order:

- direct: --streams concurrent `POST /generate` streams of --tokens tokens on the stand-in, with
  the prompt ids the gateway's `/tokenize` gives for the chat messages;
- gateway: the same number of `POST /v1/chat/completions` streams (`max_tokens` --tokens,
  `include_usage`) with those messages.

All streams of a phase start at once, on connections opened before the clock starts. While they
run, probe requests (1 output token, one at a time) measure the time to first token of a request
that arrives at a busy server; before the rounds, --idle single requests measure it on idle servers
(and the gateway's CPU per request). TTFT runs from writing the request to the first event that carries
output (direct: `output_ids`; gateway: a non-empty `delta.content`). Reported: TTFT p50/p99 of the
burst and of the probes (pooled over rounds), output tokens/s (all tokens of a phase over its wall
time, median of rounds), CPU seconds per 1,000 output tokens of the gateway, the stand-in and the
client (median of rounds, from /proc/<pid>/stat; the gateway's with its child processes under --workers N), and
how busy other processes kept the machine.

    python bench/overhead_bench.py [--streams 64] [--tokens 256] [--interval-ms 15] [--rounds 5] [--workers 1]
                                   [--port 0] [--pause 0] [--events DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"
MESSAGES = [{"role": "user", "content": "Tell me about the history of the printing press, in some detail."}]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CONFIG = """models:
  - id: {model}
    backend: {{type: sglang, url: "{url}", incremental: true, health_interval_s: 60}}
"""
"""Health checks once a minute: on a machine other work keeps busy, a check that misses its 2 s timeout would
otherwise take the only replica out for 5 s and fail the run with 503s."""


@dataclass
class Stream:
    """One request's outcome: seconds from writing the request to the first output, and the tokens received."""

    ttft: float
    tokens: int


@dataclass
class Phase:
    """One phase of one round: the burst's streams, the probes and the CPU each process spent."""

    streams: list[Stream]
    probes: list[float]
    wall: float
    cpu: dict[str, float]
    began: float
    """time.perf_counter() when the streams were started."""

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.streams)


@dataclass
class Side:
    """How to talk to one side: where, which body, and how to read its events."""

    name: str
    port: int
    path: str
    body: Callable[[int, int], bytes]
    """(request number, output tokens) → request body."""
    read: Callable[[dict[str, Any]], tuple[bool, int]]
    """One event → (it carries output, tokens it reports)."""
    phases: list[Phase] = field(default_factory=list)
    idle: list[float] = field(default_factory=list)
    """TTFT of single requests sent while nothing else runs."""
    idle_cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds per idle request, per process."""


def read_direct(event: dict[str, Any]) -> tuple[bool, int]:
    """A `/generate` event: its new ids (incremental mode)."""
    n = len(event.get("output_ids") or ())
    return n > 0, n


def read_chat(event: dict[str, Any]) -> tuple[bool, int]:
    """A chat chunk: output when a delta has content; tokens from the closing usage chunk."""
    if "error" in event:
        raise RuntimeError(f"the gateway streamed an error: {event['error']}")
    content = any(c.get("delta", {}).get("content") for c in event.get("choices") or ())
    usage = event.get("usage")
    return content, usage["completion_tokens"] if usage else 0


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A fresh connection to 127.0.0.1:`port`."""
    return await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)


async def stream(connection: tuple[asyncio.StreamReader, asyncio.StreamWriter], side: Side, body: bytes) -> Stream:
    """POST `body` on an open connection and read the SSE stream to its end."""
    reader, writer = connection
    head = (
        f"POST {side.path} HTTP/1.1\r\nhost: 127.0.0.1:{side.port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode()
    start = time.perf_counter()
    writer.write(head + body)
    headers = await reader.readuntil(b"\r\n\r\n")
    if not headers.startswith(b"HTTP/1.1 200") or b"transfer-encoding: chunked" not in headers.lower():
        raise RuntimeError(f"{side.name}: unexpected answer {headers[:200]!r} {await reader.read(500)!r}")
    first, tokens, pending = math.nan, 0, b""
    while size := int((await reader.readline()).split(b";")[0], 16):
        pending += (await reader.readexactly(size + 2))[:-2]
        *events, pending = pending.split(b"\n\n")
        for event in events:
            if event.startswith(b"data: {"):
                output, n = side.read(orjson.loads(event[6:]))
                tokens += n
                if output and math.isnan(first):
                    first = time.perf_counter() - start
    writer.close()
    return Stream(first, tokens)


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of process `pid` (all its threads) so far; None: of the whole machine."""
    if pid is None:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        return (sum(map(int, fields[:8])) - int(fields[3]) - int(fields[4])) / CLOCK_TICKS  # less idle and iowait
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def tree_cpu_seconds(pid: int) -> float:
    """cpu_seconds of process `pid` and of its running children (the processes of `gateway serve --workers N`)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(stat.parent.name))
        except (OSError, ValueError):
            continue  # gone meanwhile
    return cpu_seconds(pid) + sum(cpu_seconds(child) for child in children)


def process_cpu(name: str, pid: int | None) -> float:
    """CPU seconds so far of one of the bench's processes (the gateway with its children)."""
    return tree_cpu_seconds(pid) if name == "gateway" and pid is not None else cpu_seconds(pid)


async def run_phase(side: Side, streams: int, tokens: int, probe_gap: float, pids: dict[str, int | None]) -> Phase:
    """--streams streams at once plus sequential probes while they run; CPU of every process over the phase."""
    connections = await asyncio.gather(*(connect(side.port) for _ in range(streams)))
    before = {name: process_cpu(name, pid) for name, pid in pids.items()}
    began = time.perf_counter()
    tasks = [asyncio.create_task(stream(c, side, side.body(i, tokens))) for i, c in enumerate(connections)]
    running = asyncio.gather(*tasks)
    probes: list[float] = []
    if probe_gap > 0:
        while not running.done():
            try:
                await asyncio.wait_for(asyncio.shield(running), probe_gap)
            except TimeoutError:
                probes.append(await probe(side, -1 - len(probes)))
    results = await running
    wall = time.perf_counter() - began
    cpu = {name: process_cpu(name, pid) - before[name] for name, pid in pids.items()}
    cpu["others"] = max(0.0, cpu.pop("machine") - sum(cpu.values()))  # tick rounding can make it slightly negative
    for i, result in enumerate(results):
        if result.tokens != tokens or math.isnan(result.ttft):
            raise RuntimeError(f"{side.name} stream {i}: {result.tokens} tokens, TTFT {result.ttft}")
    return Phase(results, probes, wall, cpu, began)


async def probe(side: Side, n: int) -> float:
    """TTFT of one 1-token request (number `n`) on a fresh connection."""
    result = await stream(await connect(side.port), side, side.body(n, 1))
    if result.tokens != 1 or math.isnan(result.ttft):
        raise RuntimeError(f"{side.name} probe: {result.tokens} tokens, TTFT {result.ttft}")
    return result.ttft


async def idle_probes(side: Side, count: int, pids: dict[str, int | None]) -> tuple[list[float], dict[str, float]]:
    """`count` single requests one after another with nothing else running: their TTFTs, CPU per request."""
    before = {name: process_cpu(name, pid) for name, pid in pids.items()}
    ttfts = [await probe(side, -1000 - n) for n in range(count)]
    return ttfts, {name: (process_cpu(name, pid) - before[name]) / count for name, pid in pids.items()}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile `q` (0–100) of `values`."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def process(
    cmd: list[str], log: Path, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[str]]:
    """Run `cmd` from `cwd` (the repository root; output to `log`); SIGTERM, then SIGKILL, when the block ends."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_ready(url: str, proc: subprocess.Popen[str], log: Path, timeout: float = 180.0) -> None:
    """Poll `url` until it answers 200; fail with the process's log if it dies or takes too long."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


@contextmanager
def stand_in(
    logs: Path, interval_ms: float, port: int = 0, prefill_ms: float = 0.0
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """The fast stand-in (a decode step every `interval_ms`, the first token `prefill_ms` after the response head, on
    `port`: 0 a free one), ready: (its process, its port)."""
    cmd = [sys.executable, "bench/fast_backend.py", "--interval-ms", str(interval_ms), "--port", str(port)]
    cmd += ["--prefill-ms", str(prefill_ms)]
    with process(cmd, logs / "stand-in.log") as standin:
        port = _ready_port(logs / "stand-in.log", standin)
        wait_ready(f"http://127.0.0.1:{port}/health", standin, logs / "stand-in.log")
        yield standin, port


@contextmanager
def gateway_on_stand_in(
    logs: Path, interval_ms: float
) -> Iterator[tuple[subprocess.Popen[str], subprocess.Popen[str], int]]:
    """The fast stand-in (a decode step every `interval_ms`) and `gateway serve` in front of it (warnings only),
    both ready: (stand-in, gateway, the gateway's port)."""
    with stand_in(logs, interval_ms) as (standin, standin_port):
        url = f"http://127.0.0.1:{standin_port}"
        config = logs / "gateway.yaml"
        config.write_text(CONFIG.format(model=MODEL, url=url))
        port = free_port()
        with process(
            serve_cmd(port, "--config", str(config), "--log-level", "warning"), logs / "gateway.log"
        ) as gateway:
            wait_ready(f"http://127.0.0.1:{port}/ready", gateway, logs / "gateway.log")
            yield standin, gateway, port


def serve_cmd(port: int, *options: str) -> list[str]:
    """`gateway serve` on `port` with `options`, run by this Python."""
    return [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), *options]


@contextmanager
def gateways(
    config: Path, sides: dict[str, list[str]], logs: Path, env: dict[str, dict[str, str]] | None = None
) -> Iterator[dict[str, tuple[int, subprocess.Popen[str]]]]:
    """`gateway serve --config CONFIG` once per side with that side's options (and `env`'s variables for it), each
    on a free port and logging to `logs`, all started before any is awaited: side -> (port, process), all ready."""
    with ExitStack() as stack:
        started = {}
        for name, options in sides.items():
            port = free_port()
            log = logs / f"gateway-{port}.log"
            variables = {**os.environ, **env[name]} if env and name in env else None
            cmd = serve_cmd(port, "--config", str(config), *options)
            started[name] = (port, stack.enter_context(process(cmd, log, env=variables)), log)
        for port, proc, log in started.values():
            wait_ready(f"http://127.0.0.1:{port}/ready", proc, log)
        yield {name: (port, proc) for name, (port, proc, _) in started.items()}


def machine() -> str:
    """CPU model, cores, Python, load average and the code measured (commit, uncommitted files), for the header."""
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "?")
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])

    def git(*words: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *words], check=False, capture_output=True, text=True).stdout

    head, changed = git("rev-parse", "--short", "HEAD").strip(), git("status", "--porcelain").splitlines()
    return (
        f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}, load average {load} at start; "
        f"code: {head or '?'} with {len(changed)} uncommitted paths"
    )


async def measure(sides: list[Side], args: argparse.Namespace, pids: dict[str, int | None]) -> None:
    """Warm-up, then --rounds rounds of every side, the order alternating per round."""
    probe_gap = args.tokens * args.interval_ms / 1e3 / (args.probes + 1) if args.interval_ms > 0 else 0.0
    for side in sides:
        await run_phase(side, args.streams, min(args.tokens, 32), 0.0, pids)
        await idle_probes(side, 10, pids)  # warm-up
        side.idle, side.idle_cpu = await idle_probes(side, args.idle, pids)
    for r in range(args.rounds):
        for side in sides if r % 2 == 0 else sides[::-1]:
            await asyncio.sleep(args.pause)
            phase = await run_phase(side, args.streams, args.tokens, probe_gap, pids)
            side.phases.append(phase)
            if args.events:
                with (args.events / "client.jsonl").open("ab") as log:
                    ttfts = [s.ttft for s in phase.streams]
                    log.write(orjson.dumps({"side": side.name, "round": r + 1, "began": phase.began, "ttft": ttfts}))
                    log.write(b"\n")
            print(
                f"round {r + 1} {side.name}: {phase.tokens / phase.wall:.0f} tok/s, "
                f"burst TTFT p50 {percentile([s.ttft for s in phase.streams], 50) * 1e3:.2f} ms, "
                f"other processes {phase.cpu['others'] / phase.wall:.2f} cores",
                flush=True,
            )


def report(direct: Side, gateway: Side, args: argparse.Namespace) -> None:
    """The markdown table and the goal lines."""

    def ttft(side: Side, probes: bool) -> list[float]:
        return [t for p in side.phases for t in (p.probes if probes else [s.ttft for s in p.streams])]

    def rate(side: Side) -> float:
        return statistics.median(p.tokens / p.wall for p in side.phases)

    def cpu(side: Side, name: str) -> float:
        return statistics.median(p.cpu[name] / p.tokens * 1e3 for p in side.phases)

    rows = []
    for q in (50, 99):
        a, b = percentile(direct.idle, q) * 1e3, percentile(gateway.idle, q) * 1e3
        n = len(direct.idle)
        rows.append(
            (f"TTFT, one request on idle servers p{q} (ms, n={n}/{n})", f"{a:.2f}", f"{b:.2f}", f"+{b - a:.2f}")
        )
    for label, probes in (("TTFT, all streams at once", False), ("TTFT, probe under load", True)):
        d, g = ttft(direct, probes), ttft(gateway, probes)
        if not d or not g:
            continue
        for q in (50, 99):
            a, b = percentile(d, q) * 1e3, percentile(g, q) * 1e3
            rows.append((f"{label} p{q} (ms, n={len(d)}/{len(g)})", f"{a:.2f}", f"{b:.2f}", f"+{b - a:.2f}"))
    a, b = rate(direct), rate(gateway)
    rows.append(("output tokens/s (median of rounds)", f"{a:.0f}", f"{b:.0f}", f"{100 * b / a:.1f} %"))
    for name in ("gateway", "stand-in", "client"):
        rows.append(
            (f"{name} CPU s per 1,000 output tokens", f"{cpu(direct, name):.3f}", f"{cpu(gateway, name):.3f}", "")
        )
    rows.append(("gateway CPU ms per request (1 token, idle)", "", f"{gateway.idle_cpu['gateway'] * 1e3:.2f}", ""))
    others = max(statistics.median(p.cpu["others"] / p.wall for p in side.phases) for side in (direct, gateway))
    rows.append(
        (
            "rest of the machine: other processes, unattributed kernel time (cores busy, worst median)",
            "",
            "",
            f"{others:.2f}",
        )
    )
    print(
        f"\n{args.streams} streams x {args.tokens} tokens, decode step every {args.interval_ms:g} ms, "
        f"{args.rounds} rounds, chat completions via the gateway ({args.workers} process(es))"
    )
    print("| measure | direct | via gateway | gateway vs direct |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    burst = ttft(direct, False), ttft(gateway, False)
    probes = ttft(direct, True), ttft(gateway, True)
    added = [(percentile(g, 50) - percentile(d, 50)) * 1e3 for d, g in (burst, probes) if d and g]
    print(
        f"throughput via gateway / direct: {100 * b / a:.1f} % (goal >= 95 %); "
        f"p50 added TTFT: {', '.join(f'{x:.2f}' for x in added)} ms (burst, probes; goal <= 2 ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=64, help="concurrent streams per phase")
    parser.add_argument("--tokens", type=int, default=256, help="output tokens per stream")
    parser.add_argument("--interval-ms", type=float, default=15.0, help="stand-in decode step; 0: unpaced, no probes")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of both phases (order alternates)")
    parser.add_argument("--probes", type=int, default=20, help="probe requests per phase (paced runs only)")
    parser.add_argument("--idle", type=int, default=50, help="single requests per side before the rounds")
    parser.add_argument("--workers", type=int, default=1, help="gateway processes (gateway serve --workers)")
    parser.add_argument(
        "--port", type=int, default=0, help="the stand-in's port, the gateway's the next (0: free ones)"
    )
    parser.add_argument("--pause", type=float, default=0.0, help="seconds of quiet before every measured phase")
    parser.add_argument(
        "--events",
        type=Path,
        help="a new folder for a timeline of the bursts: each phase's start and TTFTs (client.jsonl) and what the "
        "gateway and the stand-in did (bench/burst_trace; read by bench/burst_events.py)",
    )
    args = parser.parse_args()
    if args.events:
        args.events.mkdir(parents=True)
        os.environ["BURST_EVENTS"] = str(args.events.resolve())
        tracer = str(ROOT / "bench" / "burst_trace")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (tracer, os.environ.get("PYTHONPATH"))))

    print(machine())
    with tempfile.TemporaryDirectory(prefix="overhead-bench-") as tmp:
        logs = Path(tmp)
        with stand_in(logs, args.interval_ms, args.port) as (standin, standin_port):
            backend_url = f"http://127.0.0.1:{standin_port}"
            config = logs / "gateway.yaml"
            config.write_text(CONFIG.format(model=MODEL, url=backend_url))
            gateway_port = args.port + 1 if args.port else free_port()
            workers = ["--workers", str(args.workers)] if args.workers > 1 else []
            gateway_cmd = serve_cmd(gateway_port, "--config", str(config), *workers)
            with process(gateway_cmd, logs / "gateway.log") as gateway:
                gateway_url = f"http://127.0.0.1:{gateway_port}"
                wait_ready(f"{gateway_url}/ready", gateway, logs / "gateway.log")
                while (logs / "gateway.log").read_text().count("gateway: serving") < args.workers:
                    time.sleep(0.2)  # every process of the group has loaded
                prompt = httpx.post(f"{gateway_url}/tokenize", json={"model": MODEL, "messages": MESSAGES}).json()
                ids = prompt["tokens"]
                direct = Side("direct", standin_port, "/generate", _direct_body(ids), read_direct)
                via = Side("gateway", gateway_port, "/v1/chat/completions", _chat_body(), read_chat)
                pids = {"gateway": gateway.pid, "stand-in": standin.pid, "client": os.getpid(), "machine": None}
                print(f"prompt: {len(ids)} tokens; stand-in pid {standin.pid}, gateway pid {gateway.pid}", flush=True)
                asyncio.run(measure([direct, via], args, pids))
    print(f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])} at the end")
    report(direct, via, args)


def _ready_port(log: Path, proc: subprocess.Popen[str], timeout: float = 60.0) -> int:
    """The port from the stand-in's `READY <port>` line."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text()
        if text.startswith("READY "):
            return int(text.split()[1])
        if proc.poll() is not None:
            raise RuntimeError(f"the stand-in exited with {proc.returncode}:\n{text[-3000:]}")
        time.sleep(0.1)
    raise RuntimeError("the stand-in printed no READY line")


def _direct_body(ids: list[int]) -> Callable[[int, int], bytes]:
    def body(n: int, tokens: int) -> bytes:
        params = {"max_new_tokens": tokens, "temperature": 0.0, "ignore_eos": True}
        return orjson.dumps({"input_ids": ids, "sampling_params": params, "stream": True, "rid": f"direct-{n}"})

    return body


def chat_body(tokens: int, usage: bool = True) -> bytes:
    """A streamed greedy chat request for `tokens` tokens whatever the model says, with the usage chunk when
    `usage`."""
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": MESSAGES,
        "max_tokens": tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
    }
    if usage:
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


def _chat_body() -> Callable[[int, int], bytes]:
    def body(n: int, tokens: int) -> bytes:
        return chat_body(tokens)

    return body


if __name__ == "__main__":
    main()
