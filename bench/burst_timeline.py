"""Where a burst's time goes inside the gateway, A/B: this tree against a base commit, bursts alternating.

Starts the fast stand-in and two `gateway serve` processes in front of it (this tree, and `--base` extracted with
`git archive`), each with `bench/burst_trace/` on PYTHONPATH (its `sitecustomize` times every chat request in every
gateway process), then sends --bursts bursts of --streams streamed chats at once to each gateway in turn
(connections opened first, as `bench/overhead_bench.py` does) and, pooled over the bursts, prints:

- the client's TTFT p50 / p99 (wall clock: other load on the machine moves it);
- the gateway's event-loop CPU from the burst's first arrival to a request's first body message, p50 / p99: the
  work the loop did before that request got its first token, which other load barely moves (a process that is
  preempted spends no CPU meanwhile);
- when requests wrote their backend request (loop CPU, p50), and how many times a request's task was suspended between
  arriving and writing it (0: never; its work before the backend ran in one go);
- how many backend connections a burst opened (the pool keeps idle ones 4 s: `--pause 5` makes every burst open
  its own, as the overhead bench's gateway phases mostly do, a direct phase of ~4 s between them);
- with `--workers N`, how many of each burst's requests each process served (min / max over bursts).

    python bench/burst_timeline.py [--base main] [--streams 64] [--tokens 1] [--bursts 10] [--workers 1] [--pause 0]
        [--port 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead_bench import (  # the bench folder is not a package: its path is added above
    CONFIG,
    MODEL,
    ROOT,
    Side,
    _chat_body,
    free_port,
    machine,
    percentile,
    process,
    read_chat,
    run_phase,
    serve_cmd,
    stand_in,
    wait_ready,
)
from request_cpu_bench import extract

TRACER = ROOT / "bench" / "burst_trace"


def burst_figures(records: list[dict]) -> dict[str, list[float]]:
    """Per request of one burst (all processes): loop CPU ms from its process's first arrival to its backend write
    and first body message, and its task's suspensions between its arrival and backend write."""
    out: dict[str, list[float]] = {
        "cpu_written": [],
        "cpu_body": [],
        "iterations": [],
        "sends": [],
        "cpu_all": [],
        "connects": [],
    }
    for pid in {r["pid"] for r in records}:
        mine = [r for r in records if r["pid"] == pid]
        first_cpu = min(r["arrive"][2] for r in mine)
        out["connects"].append(sum("connect" in r for r in mine))
        out["cpu_all"].append((max(r["client_body"][2] for r in mine) - first_cpu) * 1e3)
        for r in mine:
            out["cpu_written"].append((r["written"][2] - first_cpu) * 1e3)
            out["cpu_body"].append((r["client_body"][2] - first_cpu) * 1e3)
            out["iterations"].append(r["written"][1] - r["arrive"][1])
            out["sends"].append(r["sends"])
    return out


def read_trace(trace: Path) -> list[dict]:
    """The records written since the last call (each tagged with its process), removed from `trace`."""
    records = []
    for path in sorted(trace.glob("*.jsonl")):
        records += [{**json.loads(line), "pid": path.stem} for line in path.read_text().splitlines()]
        path.unlink()
    return records


async def measure(args: argparse.Namespace, sides: dict[str, tuple[Side, Path]]) -> dict[str, dict[str, list]]:
    results = {name: {"ttft": [], "spread": [], **{k: [] for k in burst_figures([])}} for name in sides}
    for side, trace in sides.values():
        await run_phase(side, args.streams, 4, 0.0, {"machine": None})  # warm-up
        await asyncio.sleep(0.3)
        read_trace(trace)
    names = list(sides)
    for b in range(args.bursts):
        for name in names if b % 2 == 0 else names[::-1]:
            side, trace = sides[name]
            await asyncio.sleep(args.pause)
            phase = await run_phase(side, args.streams, args.tokens, 0.0, {"machine": None})
            await asyncio.sleep(0.3)  # the gateway writes its records once no chat is in flight
            records = read_trace(trace)
            results[name]["ttft"] += [s.ttft * 1e3 for s in phase.streams]
            for key, values in burst_figures(records).items():
                results[name][key] += values
            counts = [sum(r["pid"] == pid for r in records) for pid in {r["pid"] for r in records}]
            results[name]["spread"].append(counts + [0] * (args.workers - len(counts)))
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        print(
            f"burst {b + 1}: TTFT p50 "
            + ", ".join(f"{n} {percentile(results[n]['ttft'][-args.streams :], 50):.1f} ms" for n in names)
            + f"; load average {load}",
            flush=True,
        )
    return results


def report(results: dict[str, dict[str, list]], args: argparse.Namespace) -> None:
    names = list(results)
    print(f"\n{args.bursts} bursts of {args.streams} x {args.tokens} tokens per gateway ({args.workers} process(es))")
    print(f"| measure | {' | '.join(names)} |")
    print("|---|" + "---:|" * len(names))

    def row(label: str, values: list[str]) -> None:
        print(f"| {label} | {' | '.join(values)} |")

    for key, label in (
        ("ttft", "client TTFT (ms, wall)"),
        ("cpu_body", "loop CPU before the first body message (ms)"),
        ("cpu_written", "loop CPU before the backend request was written (ms)"),
    ):
        row(
            f"{label} p50 / p99",
            [f"{percentile(v, 50):.1f} / {percentile(v, 99):.1f}" for v in (results[n][key] for n in names)],
        )
    row(
        "suspensions between arriving and writing the backend request, p50 / max",
        [f"{statistics.median(results[n]['iterations']):.0f} / {max(results[n]['iterations'])}" for n in names],
    )
    row(
        "loop CPU from a burst's first arrival to its last first body message (ms; per process), median",
        [f"{statistics.median(results[n]['cpu_all']):.1f}" for n in names],
    )
    row(
        "backend connections opened per burst, median",
        [f"{statistics.median(results[n]['connects']):.0f}" for n in names],
    )
    row("messages sent to the client per request, mean", [f"{statistics.mean(results[n]['sends']):.2f}" for n in names])
    if args.workers > 1:
        row(
            "requests per process in a burst: the busier one's min / median / max",
            [
                f"{min(max(c) for c in results[n]['spread'])} / {statistics.median(max(c) for c in results[n]['spread']):.0f}"
                f" / {max(max(c) for c in results[n]['spread'])}"
                for n in names
            ],
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="main", help="the commit to compare against (a git ref)")
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=1)
    parser.add_argument("--bursts", type=int, default=10, help="bursts per gateway")
    parser.add_argument("--workers", type=int, default=1, help="processes per gateway (gateway serve --workers)")
    parser.add_argument("--interval-ms", type=float, default=15.0, help="the stand-in's decode step")
    parser.add_argument(
        "--pause", type=float, default=0.0, help="seconds before each burst (past 4: the backend pool has gone cold)"
    )
    parser.add_argument("--port", type=int, default=0, help="first of three ports: stand-in, base, this (0: free ones)")
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(prefix="burst-timeline-") as tmp, ExitStack() as running:
        logs, base_tree = Path(tmp), Path(tmp) / "base"
        base_tree.mkdir()
        trees = {f"base {extract(args.base, base_tree)} ({args.base})": base_tree, "this tree": ROOT}
        _, standin_port = running.enter_context(stand_in(logs, args.interval_ms, args.port))
        config = logs / "gateway.yaml"
        config.write_text(CONFIG.format(model=MODEL, url=f"http://127.0.0.1:{standin_port}"))
        sides: dict[str, tuple[Side, Path]] = {}
        for i, (name, tree) in enumerate(trees.items()):
            port = args.port + 1 + i if args.port else free_port()
            trace, log = logs / f"trace{i}", logs / f"gateway{i}.log"
            trace.mkdir()
            env = {**os.environ, "PYTHONPATH": f"{TRACER}{os.pathsep}{tree}", "BURST_TRACE": str(trace)}
            options = ("--config", str(config), "--log-level", "warning", "--workers", str(args.workers))
            gateway = running.enter_context(process(serve_cmd(port, *options), log, tree, env))
            wait_ready(f"http://127.0.0.1:{port}/ready", gateway, log)
            sides[name] = (Side(name, port, "/v1/chat/completions", _chat_body(), read_chat), trace)
        results = asyncio.run(measure(args, sides))
    report(results, args)


if __name__ == "__main__":
    main()
