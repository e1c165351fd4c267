"""Per-burst timeline of an `overhead_bench.py --events DIR` run: where each gateway burst's first-token wait went.

For every gateway phase (the client's start B of its 64 streams), from the logs of the client, the gateway and the
stand-in (`bench/burst_trace/sitecustomize.py`), all times in ms after B:

- the client's TTFT p50;
- the gateway: when the burst's requests arrived (first, median), the median request's first body message (wall),
  and over the span from the first arrival to it: the loop's CPU, its run-queue wait (ready, but another process
  had the core) and the rest (the loop waiting in epoll for sockets: nothing to do);
- per request, medians: arrival to backend write, write to backend head (the stand-in's latency), head to body;
- the stand-in: median `/generate` read, its first decode step after B;
- what else happened nearby: client connections the gateway closed in the 200 ms before B and during the burst
  (the previous phase's teardown), backend connections opened during the burst and closed around it, pool sweeps.

    python bench/burst_events.py DIR          every burst of one run
    python bench/burst_events.py DIR DIR ...  one line per run (A/B: the per-round p50s, medians over its bursts)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

WINDOW_S = 0.15
"""How long after a phase's start its burst's events are looked for (the burst's requests all arrive well within)."""


def load(folder: Path) -> tuple[list[dict], list[list], list[list]]:
    """The client's phases, the gateway's events and the stand-in's events (each sorted by time)."""
    phases = [json.loads(line) for line in (folder / "client.jsonl").read_text().splitlines()]
    gateway = [json.loads(line) for p in folder.glob("gateway-*.jsonl") for line in p.read_text().splitlines()]
    standin = [json.loads(line) for p in folder.glob("stand-in-*.jsonl") for line in p.read_text().splitlines()]
    return phases, sorted(gateway, key=lambda e: e[1]), sorted(standin, key=lambda e: e[1])


def between(events: list[list], kind: str, start: float, end: float) -> list[list]:
    return [e for e in events if e[0] == kind and start <= e[1] < end]


def collection_cpu(gateway: list[list], start: float, end: float) -> float:
    """Loop CPU seconds of the cyclic collections that began between `start` and `end` (they do not nest: each
    gc_start is followed by its gc_stop)."""
    total, began = 0.0, None
    for event in gateway:
        if event[0] == "gc_start":
            began = event if start <= event[1] < end else None
        elif event[0] == "gc_stop" and began is not None:
            total += event[3] - began[3]
            began = None
    return total


def burst_row(phase: dict, gateway: list[list], standin: list[list], streams: int) -> dict[str, float]:
    """The figures of one gateway phase (ms after its start unless said)."""
    began = phase["began"]
    ms = lambda t: (t - began) * 1e3
    records = [e[2] for e in between(gateway, "req", began, began + WINDOW_S)][:streams]
    first = min(r["arrive"] for r in records)
    median_body = sorted(records, key=lambda r: r["client_body"][0])[len(records) // 2]["client_body"]
    wall, cpu, wait = (median_body[i] - first[i] for i in (0, 2, 3))
    ticks = between(standin, "tick", began, began + WINDOW_S)
    gens = [e[1] for e in between(standin, "gen", began, began + WINDOW_S)][:streams]
    return {
        "ttft": statistics.median(phase["ttft"]) * 1e3,
        "arrive0": ms(first[0]),
        "arrive50": statistics.median(ms(r["arrive"][0]) for r in records),
        "body50": ms(median_body[0]),
        "cpu": cpu * 1e3,
        "runq": wait * 1e3,
        "epoll": (wall - cpu - wait) * 1e3,
        "plan": statistics.median((r["written"][0] - r["arrive"][0]) * 1e3 for r in records),
        "backend": statistics.median((r["backend_head"][0] - r["written"][0]) * 1e3 for r in records),
        "relay": statistics.median((r["client_body"][0] - r["backend_head"][0]) * 1e3 for r in records),
        "gen50": statistics.median(ms(t) for t in gens) if gens else float("nan"),
        "tick": ms(ticks[0][1]) if ticks else float("nan"),
        "closes_before": len(between(gateway, "close", began - 0.2, began)),
        "closes_during": len(between(gateway, "close", began, median_body[0])),
        "bopen": len(between(gateway, "bopen", began, began + WINDOW_S)),
        "bclose": len(between(gateway, "bclose", began - 1.0, began + WINDOW_S)),
        "sweeps": len(between(gateway, "sweep", began, median_body[0])),
        "gc": collection_cpu(gateway, first[0], median_body[0]) * 1e3,
        "gc2": sum(e[2] == 2 for e in between(gateway, "gc_start", first[0], median_body[0])),
    }


COLUMNS = (
    ("ttft", "client TTFT p50"),
    ("arrive0", "first arrival"),
    ("arrive50", "median arrival"),
    ("body50", "median 1st body"),
    ("cpu", "loop CPU"),
    ("runq", "run-queue wait"),
    ("epoll", "epoll wait"),
    ("plan", "arrive→write p50"),
    ("backend", "write→head p50"),
    ("relay", "head→body p50"),
    ("gen50", "stand-in read p50"),
    ("tick", "1st step"),
    ("closes_before", "client closes 200 ms before"),
    ("closes_during", "client closes during"),
    ("bopen", "backend opens"),
    ("bclose", "backend closes ±1 s"),
    ("sweeps", "sweeps during"),
    ("gc", "GC CPU ms"),
    ("gc2", "full GCs"),
)


def rows_of(folder: Path) -> list[tuple[int, dict[str, float]]]:
    """(round, figures) of every gateway burst logged in `folder`."""
    phases, gateway, standin = load(folder)
    return [(p["round"], burst_row(p, gateway, standin, len(p["ttft"]))) for p in phases if p["side"] == "gateway"]


def direct_p50s(folder: Path) -> list[float]:
    """The direct phases' TTFT p50 (ms), in order."""
    phases = [json.loads(line) for line in (folder / "client.jsonl").read_text().splitlines()]
    return [statistics.median(p["ttft"]) * 1e3 for p in phases if p["side"] == "direct"]


def table_row(label: str, values: list[float | int]) -> str:
    return f"| {label} | " + " | ".join(f"{v:.1f}" for v in values) + " |"


def per_burst(folder: Path) -> None:
    """Every gateway burst of one run, then the medians of its faster and slower half."""
    rows = rows_of(folder)
    print("| round | " + " | ".join(label for _, label in COLUMNS) + " |")
    print("|---:|" + "---:|" * len(COLUMNS))
    for r, row in rows:
        print(table_row(str(r), [row[key] for key, _ in COLUMNS]))
    cut = statistics.median(row["ttft"] for _, row in rows)
    for name, group in (
        ("fast half (median)", [x for _, x in rows if x["ttft"] <= cut]),
        ("slow half (median)", [x for _, x in rows if x["ttft"] > cut]),
    ):
        if group:
            print(table_row(name, [statistics.median(g[key] for g in group) for key, _ in COLUMNS]))


SUMMARY = ("ttft", "cpu", "runq", "gc", "plan", "backend", "relay")


def summary(folders: list[Path]) -> None:
    """One line per run: per-round gateway TTFT p50s, the direct median, and medians over its bursts."""
    print(
        "| run | gateway burst p50 per round (ms) | direct p50 median | "
        + " | ".join(dict(COLUMNS)[k] for k in SUMMARY)
        + " |"
    )
    print("|---|---|---:|" + "---:|" * len(SUMMARY))
    for folder in folders:
        rows = [row for _, row in rows_of(folder)]
        rounds = " / ".join(f"{row['ttft']:.1f}" for row in rows)
        medians = [statistics.median(row[k] for row in rows) for k in SUMMARY]
        print(table_row(f"{folder.name} | {rounds} | {statistics.median(direct_p50s(folder)):.1f}", medians))


def main() -> None:
    folders = [Path(a) for a in sys.argv[1:]]
    if len(folders) == 1:
        per_burst(folders[0])
    else:
        summary(folders)


if __name__ == "__main__":
    main()
