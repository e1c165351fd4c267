"""Gateway CPU per streamed token, two checkouts side by side: each checkout's `gateway serve` in front of one
fast stand-in, the same streaming load through each in alternating order, round by round.

Answers one question robustly on a shared machine: how much CPU does each gateway spend per 1,000 output tokens
(from /proc/<pid>/stat, so load from other processes does not enter it) and how many tokens/s it passes. Used to A/B
a change to the per-token path (`--base` another worktree, e.g. main) before `bench/overhead_bench.py` measures the
goals against direct.

    python bench/stream_ab.py --base /work/main [--port 19400] [--interval-ms 15] [--streams 64] [--tokens 256]

With `--callgrind` both gateways run under valgrind's callgrind and each counts the instructions (user space, the
whole process) of one phase: a figure no other load on the machine changes. Few, slow streams keep every event
alone there as on a quiet machine (the gateway runs ~50x slower under callgrind):

    python bench/stream_ab.py --base /work/main --callgrind --streams 2 --tokens 400 --interval-ms 40
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead_bench import (
    CONFIG,
    MESSAGES,
    MODEL,
    ROOT,
    Side,
    _chat_body,
    process,
    read_chat,
    run_phase,
    serve_cmd,
    stand_in,
    wait_ready,
)
from request_cpu_bench import WARM_TOKENS, counted


def gateway_cmd(checkout: Path, port: int, config: Path, callgrind: Path | None = None) -> list[str]:
    """`gateway serve` of `checkout` (run from that checkout, which is first on the path); under callgrind, counting
    nothing until told, when `callgrind` names its output."""
    serve = serve_cmd(port, "--config", str(config), "--log-level", "warning")
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={callgrind}.%p"]
    return ["env", "-C", str(checkout), f"PYTHONPATH={checkout}", *(valgrind if callgrind else []), *serve]


async def phase_instructions(side: Side, pid: int, args: argparse.Namespace, out: Path) -> float:
    """Instructions the gateway `pid` (under callgrind, writing `out`.<pid>) ran per output token over one phase."""
    # warm-up, not counted: past the stand-in's cycle of ids, each of which the detokenizer learns once
    await run_phase(side, args.streams, min(args.tokens, WARM_TOKENS), 0.0, {"machine": None})
    instructions, phase, _ = await counted(pid, out, run_phase(side, args.streams, args.tokens, 0.0, {"machine": None}))
    return instructions / phase.tokens


async def rounds(sides: list[Side], pids: dict[str, dict[str, int | None]], args: argparse.Namespace) -> dict:
    """Warm-up, then --rounds rounds, the order alternating; per side the phases' (CPU s per 1,000 tokens, tok/s)."""
    out: dict[str, list[tuple[float, float]]] = {side.name: [] for side in sides}
    for side in sides:
        await run_phase(side, args.streams, min(args.tokens, 32), 0.0, pids[side.name])
    for r in range(args.rounds):
        for side in sides if r % 2 == 0 else sides[::-1]:
            phase = await run_phase(side, args.streams, args.tokens, 0.0, pids[side.name])
            per_k = phase.cpu["gateway"] / phase.tokens * 1e3
            out[side.name].append((per_k, phase.tokens / phase.wall))
            print(
                f"round {r + 1} {side.name}: {per_k:.4f} s CPU / 1,000 tokens, {phase.tokens / phase.wall:.0f} "
                f"tok/s, other processes {phase.cpu['others'] / phase.wall:.2f} cores",
                flush=True,
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True, help="the other checkout (e.g. /work/main)")
    parser.add_argument("--port", type=int, default=19400, help="first of three ports: stand-in, base, this")
    parser.add_argument("--interval-ms", type=float, default=15.0)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--callgrind", action="store_true", help="count instructions per token (one phase per side)")
    args = parser.parse_args()
    print(f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])} at start", flush=True)
    with tempfile.TemporaryDirectory(prefix="stream-ab-") as tmp:
        logs = Path(tmp)
        with stand_in(logs, args.interval_ms, args.port) as (_, standin_port):
            url = f"http://127.0.0.1:{standin_port}"
            config = logs / "gateway.yaml"
            config.write_text(CONFIG.format(model=MODEL, url=url))
            base_port, this_port = args.port + 1, args.port + 2
            outs = {"base": logs / "base.callgrind", "this": logs / "this.callgrind"} if args.callgrind else {}
            with (
                process(
                    gateway_cmd(args.base.resolve(), base_port, config, outs.get("base")), logs / "base.log"
                ) as base,
                process(gateway_cmd(ROOT, this_port, config, outs.get("this")), logs / "this.log") as this,
            ):
                for port, proc, log in ((base_port, base, "base.log"), (this_port, this, "this.log")):
                    wait_ready(f"http://127.0.0.1:{port}/ready", proc, logs / log, timeout=900.0)
                sides = [
                    Side("base", base_port, "/v1/chat/completions", _chat_body(), read_chat),
                    Side("this", this_port, "/v1/chat/completions", _chat_body(), read_chat),
                ]
                machine = {"client": os.getpid(), "machine": None}
                pids = {"base": {"gateway": base.pid, **machine}, "this": {"gateway": this.pid, **machine}}
                httpx.post(f"http://127.0.0.1:{base_port}/tokenize", json={"model": MODEL, "messages": MESSAGES})
                if args.callgrind:
                    counts = {
                        side.name: asyncio.run(
                            phase_instructions(side, pids[side.name]["gateway"], args, outs[side.name])
                        )
                        for side in sides
                    }
                else:
                    results = asyncio.run(rounds(sides, pids, args))
    print(f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])} at the end")
    if args.callgrind:
        print(
            f"\n{args.streams} streams x {args.tokens} tokens, step every {args.interval_ms:g} ms, one phase per side"
        )
        print("| gateway | instructions per output token (callgrind, whole process) |\n|---|---:|")
        for name, count in counts.items():
            print(f"| {name} | {count:,.0f} |")
        return
    print(
        f"\n{args.streams} streams x {args.tokens} tokens, step every {args.interval_ms:g} ms, {args.rounds} rounds "
        f"(medians); base = {args.base}, this = {ROOT}"
    )
    print("| gateway | CPU s per 1,000 output tokens | output tokens/s |")
    print("|---|---:|---:|")
    for name, values in results.items():
        cpu = statistics.median(v[0] for v in values)
        rate = statistics.median(v[1] for v in values)
        print(f"| {name} | {cpu:.4f} | {rate:.0f} |")


if __name__ == "__main__":
    main()
