"""`gateway serve` start-up, checkouts interleaved: CPU to ready, first grammar request.

Starts bench/fast_backend.py once, then per round each checkout's `gateway serve` on it (a config naming it an
incremental SGLang backend) in turn (the order rotating each round); with `--bundled`, no external backend: each
gateway serves the embedded model with its bundled worker (`--threads 2`). Measured: the gateway process's CPU
seconds (user + system, from /proc) from spawn until /ready answers 200, the same for the gateway and every process
under it (the worker, compile children) and the wall time to it, and the gateway's resident memory then (VmRSS, and
its peak VmHWM; `tree_rss_mb`: with every process under it, a bundled worker). With `--workers N` in a checkout's
flags, "the gateway" is every `gateway.cli` process of the group
(the parent and its N serving processes): CPU and RSS summed, the peak the largest, counted once each has written
its "serving" line and /ready answers 200. `--settle` seconds later (its CPU by then), one chat request with a
json_schema response_format, the first grammar that process builds (whatever it still has to load for it, the
compile child's fork, the compile), its wall latency and the CPU it cost the gateway processes and their compile
children together (not the worker; `first_grammar_tree_cpu_s`: every process, the worker's too); then one with
another schema (a warm process).

    python bench/serve_start_ab.py --tree base=/tmp/base-checkout --tree branch=. [--tree 'lazy=. --no-grammar-warmup']
        [--tree 'group=. --workers 2']
        [--runs 5] [--port 38000] [--settle 0] [--bundled]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.checkpoint import EMBEDDED_MODEL_ID

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
TICKS = os.sysconf("SC_CLK_TCK")
MODEL = EMBEDDED_MODEL_ID
SCHEMAS = [
    {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]},
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}, "required": ["name"]},
]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def tree_cpu(pid: int) -> float:
    """CPU of a process and of every live process under it."""
    return cpu_seconds(pid) + sum(tree_cpu(child) for child in children(pid))


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and of every live process under it (a bundled worker's too)."""
    return memory_mb(pid, "VmRSS") + sum(tree_rss_mb(child) for child in children(pid))


def grammar_cpu(gateways: list[int]) -> float:
    """CPU of the gateway processes and their compile children (forks: their command line is their parent's)."""
    total = 0.0
    for pid in gateways:
        total += cpu_seconds(pid)
        total += sum(cpu_seconds(c) for c in children(pid) if c not in gateways and cmdline(c) == cmdline(pid))
    return total


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def gateway_pids(pid: int) -> list[int]:
    """The gateway process and every `gateway.cli` process under it (a group's serving processes)."""
    found = [pid]
    for child in children(pid):
        if b"gateway.cli" in cmdline(child):
            found += gateway_pids(child)
    return found


def memory_mb(pid: int, field: str) -> float:
    """One of /proc/PID/status's memory fields (VmRSS, VmHWM) in MB; 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def start_backend(port: int) -> subprocess.Popen[str]:
    command = [PYTHON, str(ROOT / "bench" / "fast_backend.py"), "--port", str(port), "--interval-ms", "0"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        raise RuntimeError(f"fast_backend did not start: {line!r}")
    return proc


def grammar_request(client: httpx.Client, url: str, schema: dict) -> float:
    """Wall seconds of one non-streamed chat request whose response_format needs a grammar."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Answer in JSON."}],
        "max_tokens": 4,
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
    }
    started = time.perf_counter()
    response = client.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"grammar request failed: {response.status_code} {response.text[:300]}")
    return elapsed


def one_run(tree: Path, flags: list[str], port: int, backend_port: int | None, settle: float) -> dict[str, float]:
    """One gateway process of `tree` (with its bundled worker when there is no `backend_port`): its start, its first
    grammar request `settle` seconds after it is ready (its CPU by then too), and a second grammar request."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [PYTHON, "-m", "gateway.cli", "serve", "--port", str(port), "--log-level", "warning"]
    url = f"http://127.0.0.1:{port}"
    serving = int(flags[flags.index("--workers") + 1]) if "--workers" in flags else 1
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as config, tempfile.TemporaryFile() as log:
        backend = ["--threads", "2"]
        if backend_port:  # fast_backend streams incremental output_ids, which `--backend-url` does not expect
            backend = ["--config", config.name]
            url_line = f"backend: {{type: sglang, url: 'http://127.0.0.1:{backend_port}', incremental: true}}"
            config.write(f"models:\n  - id: {MODEL}\n    {url_line}\n")
            config.flush()
        command += [*backend, *flags]
        started = time.perf_counter()
        proc = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            return _measured(proc, url, log, serving, started, settle)
        finally:
            proc.terminate()
            proc.wait(30)


def _measured(
    proc: subprocess.Popen[bytes], url: str, log: IO[bytes], serving: int, started: float, settle: float
) -> dict[str, float]:
    with httpx.Client() as client:
        while True:
            log.seek(0)
            if proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {proc.returncode}: {log.read()[-2000:]!r}")
            try:
                if log.read().count(b"gateway: serving") >= serving and client.get(f"{url}/ready").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        gateways = gateway_pids(proc.pid)
        row = {
            "start_wall_s": time.perf_counter() - started,
            "start_cpu_s": sum(cpu_seconds(pid) for pid in gateways),
            "start_tree_cpu_s": tree_cpu(proc.pid),
            "rss_mb": sum(memory_mb(pid, "VmRSS") for pid in gateways),
            "tree_rss_mb": tree_rss_mb(proc.pid),
            "peak_rss_mb": max(memory_mb(pid, "VmHWM") for pid in gateways),
        }
        time.sleep(settle)
        before, before_tree = grammar_cpu(gateways), tree_cpu(proc.pid)
        row["settled_cpu_s"] = before
        row["first_grammar_ms"] = grammar_request(client, url, SCHEMAS[0]) * 1e3
        row["first_grammar_cpu_s"] = grammar_cpu(gateways) - before
        row["first_grammar_tree_cpu_s"] = tree_cpu(proc.pid) - before_tree
        row["second_grammar_ms"] = grammar_request(client, url, SCHEMAS[1]) * 1e3
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tree", action="append", required=True, help="'NAME=PATH [serve flags]' of a checkout (repeat)"
    )
    parser.add_argument("--runs", type=int, default=5, help="rounds; each starts every checkout's gateway once")
    parser.add_argument("--port", type=int, default=38000, help="the backend's port; gateways use the next ones")
    parser.add_argument("--settle", type=float, default=0.0, help="seconds between ready and the first grammar request")
    parser.add_argument("--bundled", action="store_true", help="the embedded model on each gateway's bundled worker")
    args = parser.parse_args()
    trees = [(name, spec.split()) for name, spec in (t.split("=", 1) for t in args.tree)]
    backend = None if args.bundled else start_backend(args.port)
    rows: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    try:
        for run in range(args.runs):
            order = trees[run % len(trees) :] + trees[: run % len(trees)]
            for name, (path, *flags) in order:
                row = one_run(
                    Path(path).resolve(), flags, args.port + 1, None if backend is None else args.port, args.settle
                )
                rows[name].append(row)
                print(f"run {run} {name:>10}: " + "  ".join(f"{k} {v:.3f}" for k, v in row.items()), flush=True)
    finally:
        if backend is not None:
            backend.terminate()
            backend.wait(30)
    columns = list(next(iter(rows.values()))[0])
    print(f"\n| checkout | {' | '.join(columns)} |")
    print(f"|---|{'---|' * len(columns)}")
    for name, runs in rows.items():
        cells = [f"{statistics.median(r[c] for r in runs):.3f}" for c in columns]
        print(f"| {name} (median of {len(runs)}) | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
