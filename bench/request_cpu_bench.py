"""Per-request cost of the gateway, A/B: this working tree against a base commit, side by side in one run.

Starts the fast stand-in (`bench/fast_backend.py`) and two `gateway serve` processes in front of it: one from
this working tree, one from `--base` (extracted with `git archive` into a temporary folder), both with the
default log level (one access line per request, as `bench/overhead_bench.py` runs them). Then, per round, in
alternating order, each gateway gets:

- `--requests` streamed 1-token chats one after another, each on a fresh connection (as the overhead bench's
  probes): the gateway's CPU per request (user + system, /proc/<pid>/stat), which other load on the machine
  barely moves;
- a burst of `--streams` streamed chats of `--tokens` tokens sent at once (as the overhead bench's burst): time
  to first token p50 / p99, which load does move.

The stand-in's own burst (direct) runs in every round too. Medians of rounds for CPU, pooled TTFTs.

With `--callgrind` both gateways run under valgrind's callgrind instead, and each side's `--requests` sequential
requests are counted in instructions (user space, the whole process: uvicorn, the gateway, the libraries), a
figure no other load on the machine changes; no bursts then (their timing means nothing under valgrind). Then
`--long-requests` requests of `--long-tokens` tokens each are counted the same way: what one adds over a 1-token
request, per token it adds, is the gateway's cost per streamed token (each event read alone: keep the stand-in's
`--interval-ms` well above the gateway's time per event under callgrind, ~2 ms quiet; 40 on a busy machine).
With `--segments` too, callgrind dumps its counts at each connection accepted and each socket write (uvloop's), and
the 1-token requests' instructions are split where they leave the process: accepted → backend request written →
response head → first token's body → last body → next connection (medians; the long requests are then skipped).
What comes before the first token's body is what a burst's time to first token waits on.
With `--prefill-ms` the stand-in sends each response's head at once and its first token that much later, in a
write of its own (a real server's prefill): the gateway then reads the head and the first event apart, as it does
in front of SGLang or vLLM (without it the two usually come in one read, under callgrind always).

    python bench/request_cpu_bench.py [--base main] [--port 0] [--rounds 6] [--requests 200] [--streams 64] [--tokens 32]
    python bench/request_cpu_bench.py --callgrind [--base main] [--requests 200] [--long-tokens 64] [--interval-ms 40]
    python bench/request_cpu_bench.py --callgrind --segments [--base main] [--requests 50] [--prefill-ms 100]
    python bench/request_cpu_bench.py --callgrind --base HEAD --tree-args=--no-proxy-headers   (a flag's A/B)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from callgrind_counts import dump_total  # the bench folder is not a package: its path is added above
from overhead_bench import (
    CONFIG,
    MESSAGES,
    MODEL,
    ROOT,
    Side,
    _chat_body,
    _direct_body,
    connect,
    cpu_seconds,
    free_port,
    machine,
    percentile,
    probe,
    process,
    read_chat,
    read_direct,
    run_phase,
    stand_in,
    stream,
    wait_ready,
)

T = TypeVar("T")


def extract(ref: str, into: Path) -> str:
    """The tree of commit `ref` written under `into`; returns the commit's short hash."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", ref], check=True, capture_output=True, text=True
    ).stdout.strip()


ACCEPT = "*UVStreamServer__on_listen*"
WRITE = "*UVStream__try_write*"
"""uvloop's functions that accept a connection and write to a socket: `--segments` dumps the counts before each."""
SEGMENTS = (
    "accepted → backend request written",
    "→ response head written",
    "→ first token's body written",
    "→ last body written",
    "→ next connection accepted",
)
"""A 1-token request's segments, each ending at a dump: four writes after its connection is accepted, then the next
connection's accept (its connection closed and its access line written in between)."""


def gateway_cmd(
    port: int, config: Path, callgrind: Path | None, segments: bool = False, extra: tuple[str, ...] = ()
) -> list[str]:
    """`gateway serve` on `port` (with `extra` flags); under callgrind (counting nothing until told) when `callgrind`
    names its output, dumping at each accept and socket write with `segments`."""
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={callgrind}.%p"]
    if segments:
        valgrind += [f"--dump-before={ACCEPT}", f"--dump-before={WRITE}"]
    serve = [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), "--config", str(config), *extra]
    return [*valgrind, *serve] if callgrind else serve


async def callgrind_control(pid: int, *command: str) -> None:
    """Tell the callgrind of process `pid` to zero, start or stop counting, or dump its counts."""
    control = await asyncio.create_subprocess_exec(
        "callgrind_control", *command, str(pid), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    if await control.wait() != 0:
        raise RuntimeError(f"callgrind_control {' '.join(command)} {pid} failed")


async def counted(pid: int, out: Path, work: Awaitable[T]) -> tuple[int, T, list[Path]]:
    """The instructions the process `pid` (under callgrind, writing `out`.<pid>) ran while `work` ran, its value, and
    the dumps they were read from, in order (`out`.<pid>.<n>: one, or more where the process dumps on triggers)."""

    def dumps() -> list[Path]:
        return sorted(out.parent.glob(f"{out.name}.{pid}.*"), key=lambda path: int(path.suffix[1:]))

    before = len(dumps())
    for command in (["-z"], ["-i", "on"]):
        await callgrind_control(pid, *command)
    value = await work
    for command in (["-i", "off"], ["-d"]):
        await callgrind_control(pid, *command)
    new = dumps()[before:]
    return sum(map(dump_total, new)), value, new


async def sequential_instructions(side: Side, pid: int, count: int, out: Path) -> tuple[float, dict[str, float] | None]:
    """Instructions the gateway `pid` (under callgrind, writing `out`.<pid>) ran per request over `count` requests,
    and their SEGMENTS' medians when it dumps at its accepts and writes."""
    for n in range(20):
        await probe(side, -1 - n)  # warm-up, not counted

    async def requests() -> None:
        for n in range(count):
            await probe(side, -1000 - n)

    instructions, _, dumps = await counted(pid, out, requests())
    return instructions / count, (request_segments(dumps) if len(dumps) > 1 else None)


def request_segments(dumps: list[Path]) -> dict[str, float]:
    """SEGMENTS' median instructions over the requests whose dumps (each ending before the trigger it names) come in
    the expected order: an accept, four writes, the next accept."""
    triggers = [_trigger(dump) for dump in dumps]
    accepts = [i for i, trigger in enumerate(triggers) if trigger == "accept"]
    counts: list[list[int]] = []
    for start, end in itertools.pairwise(accepts):
        if end - start == len(SEGMENTS) and all(t == "write" for t in triggers[start + 1 : end]):
            counts.append([dump_total(dump) for dump in dumps[start + 1 : end + 1]])
    if not counts:
        raise RuntimeError("no request's dumps came in the expected order")
    return {name: statistics.median(c[i] for c in counts) for i, name in enumerate(SEGMENTS)}


def _trigger(dump: Path) -> str:
    """What made callgrind write `dump`: "accept", "write" or something else (the bench's own `-d`)."""
    with dump.open() as lines:
        desc = next((line for line in lines if line.startswith("desc: Trigger:")), "")
    return "accept" if "on_listen" in desc else "write" if "try_write" in desc else "other"


async def long_requests(side: Side, count: int, tokens: int) -> None:
    """`count` requests of `tokens` output tokens each, one after another on fresh connections."""
    for n in range(count):
        result = await stream(await connect(side.port), side, side.body(-5000 - n, tokens))
        if result.tokens != tokens:
            raise RuntimeError(f"{side.name}: {result.tokens} tokens of {tokens}")


WARM_TOKENS = 256
"""More than the stand-in's cycle of output ids (184): the detokenizer has then seen every id, as in a gateway that
has served a while (each id's bytes are learned once per process, at ~15 K instructions)."""


async def callgrind_counts(
    side: Side, pid: int, args: argparse.Namespace, out: Path
) -> tuple[float, float, dict[str, float] | None]:
    """Instructions per 1-token request, and per output token: (a `--long-tokens` request less a 1-token one) over
    the tokens it adds (not counted with `--segments`: nan); after a request of WARM_TOKENS (not counted). Then the
    1-token requests' segments, with `--segments`."""
    await long_requests(side, 1, WARM_TOKENS)
    per_request, segments = await sequential_instructions(side, pid, args.requests, out)
    if args.segments:
        return per_request, math.nan, segments
    instructions, _, _ = await counted(pid, out, long_requests(side, args.long_requests, args.long_tokens))
    return per_request, (instructions / args.long_requests - per_request) / (args.long_tokens - 1), None


async def sequential_cpu(side: Side, pid: int, count: int) -> float:
    """CPU seconds the gateway `pid` spent per request over `count` 1-token requests sent one after another."""
    before = cpu_seconds(pid)
    for n in range(count):
        await probe(side, -1000 - n)
    return (cpu_seconds(pid) - before) / count


async def measure(args: argparse.Namespace, direct: Side, sides: dict[str, tuple[Side, int]]) -> dict[str, dict]:
    """Warm-up, then --rounds rounds: every gateway's sequential requests and burst, and the direct burst."""
    results: dict[str, dict] = {name: {"cpu": [], "burst": [], "burst_cpu": []} for name in [*sides, "direct"]}
    for side, pid in sides.values():
        await sequential_cpu(side, pid, 20)
        await run_phase(side, args.streams, 4, 0.0, {"gateway": pid, "machine": None})
    await run_phase(direct, args.streams, 4, 0.0, {"machine": None})
    names = list(sides)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            side, pid = sides[name]
            results[name]["cpu"].append(await sequential_cpu(side, pid, args.requests))
            phase = await run_phase(side, args.streams, args.tokens, 0.0, {"gateway": pid, "machine": None})
            results[name]["burst"] += [s.ttft for s in phase.streams]
            results[name]["burst_cpu"].append(phase.cpu["gateway"] / args.streams)
        phase = await run_phase(direct, args.streams, args.tokens, 0.0, {"machine": None})
        results["direct"]["burst"] += [s.ttft for s in phase.streams]
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        cpu = ", ".join(f"{n} {results[n]['cpu'][-1] * 1e3:.3f} ms" for n in names)
        print(f"round {r + 1}: CPU per request {cpu}; load average {load}", flush=True)
    return results


def report(results: dict[str, dict], names: list[str], args: argparse.Namespace) -> None:
    print(f"\n| measure | direct | {' | '.join(names)} |")
    print("|---|---:|" + "---:|" * len(names))

    def row(label: str, direct: str, values: list[str]) -> None:
        print(f"| {label} | {direct} | {' | '.join(values)} |")

    row(
        f"gateway CPU ms per request (1 token, {args.requests} one after another; median of {args.rounds} rounds)",
        "",
        [f"{statistics.median(results[n]['cpu']) * 1e3:.3f}" for n in names],
    )
    for q in (50, 99):
        direct = percentile(results["direct"]["burst"], q) * 1e3
        values = [percentile(results[n]["burst"], q) * 1e3 for n in names]
        row(
            f"burst of {args.streams} x {args.tokens} tokens: TTFT p{q} (ms; added over direct)",
            f"{direct:.2f}",
            [f"{v:.2f} (+{v - direct:.2f})" for v in values],
        )
    row(
        f"gateway CPU ms per burst stream ({args.tokens} tokens; median of rounds)",
        "",
        [f"{statistics.median(results[n]['burst_cpu']) * 1e3:.3f}" for n in names],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="main", help="the commit to compare against (a git ref)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=200, help="sequential 1-token requests per gateway per round")
    parser.add_argument("--streams", type=int, default=64, help="streams of a burst")
    parser.add_argument("--tokens", type=int, default=32, help="output tokens per burst stream")
    parser.add_argument("--interval-ms", type=float, default=15.0, help="the stand-in's decode step")
    parser.add_argument("--prefill-ms", type=float, default=0.0, help="the stand-in's time from head to first token")
    parser.add_argument("--port", type=int, default=0, help="first of three ports: stand-in, base, this (0: free ones)")
    parser.add_argument("--callgrind", action="store_true", help="count instructions per request instead")
    parser.add_argument("--long-tokens", type=int, default=64, help="callgrind: output tokens of the long requests")
    parser.add_argument("--long-requests", type=int, default=20, help="callgrind: long requests one after another")
    parser.add_argument("--segments", action="store_true", help="callgrind: split a request where it writes")
    parser.add_argument(
        "--tree-args",
        default="",
        help="more `gateway serve` flags for this tree's gateway, space-separated (a flag's A/B: --base HEAD "
        "--tree-args=--no-proxy-headers)",
    )
    parser.add_argument("--keep", type=Path, help="callgrind: copy the dumps into this folder (for callgrind_annotate)")
    args = parser.parse_args()

    print(machine())
    with tempfile.TemporaryDirectory(prefix="request-cpu-bench-") as tmp:
        logs, base_tree = Path(tmp), Path(tmp) / "base"
        base_tree.mkdir()
        base = f"base {extract(args.base, base_tree)} ({args.base})"
        with stand_in(logs, args.interval_ms, args.port, args.prefill_ms) as (_, standin_port):
            url = f"http://127.0.0.1:{standin_port}"
            config = logs / "gateway.yaml"
            config.write_text(CONFIG.format(model=MODEL, url=url))
            ports = (
                {base: args.port + 1, "this tree": args.port + 2}
                if args.port
                else {base: free_port(), "this tree": free_port()}
            )
            outs = {name: logs / f"{'base' if name == base else 'tree'}.callgrind" for name in ports}
            cmds = {
                name: gateway_cmd(
                    ports[name],
                    config,
                    outs[name] if args.callgrind else None,
                    args.segments,
                    tuple(args.tree_args.split()) if name == "this tree" else (),
                )
                for name in ports
            }
            env = {**os.environ, "PYTHONPATH": str(base_tree)}
            with (
                process(cmds[base], logs / "base.log", base_tree, env) as base_gateway,
                process(cmds["this tree"], logs / "tree.log") as tree_gateway,
            ):
                pids = {base: base_gateway.pid, "this tree": tree_gateway.pid}
                for name, gateway in ((base, base_gateway), ("this tree", tree_gateway)):
                    log = logs / ("base.log" if name == base else "tree.log")
                    wait_ready(f"http://127.0.0.1:{ports[name]}/ready", gateway, log, timeout=900.0)
                prompt = {"model": MODEL, "messages": MESSAGES}
                ids = httpx.post(f"http://127.0.0.1:{ports[base]}/tokenize", json=prompt).json()["tokens"]
                direct = Side("direct", standin_port, "/generate", _direct_body(ids), read_direct)
                sides = {
                    name: (Side(name, port, "/v1/chat/completions", _chat_body(), read_chat), pids[name])
                    for name, port in ports.items()
                }
                started = time.monotonic()
                if args.callgrind:
                    counts = {
                        name: asyncio.run(callgrind_counts(side, pid, args, outs[name]))
                        for name, (side, pid) in sides.items()
                    }
                else:
                    results = asyncio.run(measure(args, direct, sides))
                if args.callgrind and args.keep:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    for dump in logs.glob("*.callgrind.*"):
                        shutil.copy(dump, args.keep / dump.name)
    print(f"{time.monotonic() - started:.0f} s; load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    if args.callgrind:
        print(f"\n| instructions (callgrind, whole gateway process) | {' | '.join(counts)} |")
        print("|---|" + "---:|" * len(counts))
        print(
            f"| per request (1 token, {args.requests} one after another) | "
            + " | ".join(f"{c[0]:,.0f}" for c in counts.values())
            + " |"
        )
        print(
            f"| per output token ({args.long_requests} requests of {args.long_tokens} tokens, less 1-token ones) | "
            + " | ".join(f"{c[1]:,.0f}" for c in counts.values())
            + " |"
        )
        for segment in SEGMENTS if args.segments else ():
            print(f"| {segment} (median) | " + " | ".join(f"{c[2][segment]:,.0f}" for c in counts.values()) + " |")
    else:
        report(results, list(sides), args)


if __name__ == "__main__":
    main()
