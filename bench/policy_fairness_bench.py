"""A 1-token request of one client while another's `n: 16` request runs on the bundled worker (8 slots, the
embedded SmolLM2), on `gateway serve` without and with `--policies` (two tenants, so the fair queue applies),
in one run: the seconds the small request takes once 7 of the big one's choices decode.

    python bench/policy_fairness_bench.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.overhead_bench import machine
from tests.e2e.conftest import GatewayProcess
from tests.policies.deployment import auth, write_tenant
from tests.policies.test_worker_http import WAIT_S, small_while_bulk_runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(machine(), flush=True)
    with tempfile.TemporaryDirectory(prefix="fairness-bench-") as tmp:
        policies = Path(tmp)
        write_tenant(policies, "bulk", models=["smollm2-*"], priority="batch")
        write_tenant(policies, "chatty", models=["smollm2-*"])
        sides = {
            "open (no --policies)": ([], {}, {}),
            "--policies": (["--policies", tmp], auth("bulk"), auth("chatty")),
        }
        results: dict[str, list[tuple[float, float]]] = {}
        for name, (flags, bulk_headers, small_headers) in sides.items():
            gateway = GatewayProcess("--default-max-tokens", "64", *flags)
            try:
                with httpx.Client(base_url=gateway.base_url, timeout=WAIT_S) as client:
                    results[name] = []
                    for _ in range(args.rounds):
                        small, took, bulk = small_while_bulk_runs(client, bulk_headers, small_headers)
                        assert small.status_code == 200, small.text
                        results[name].append((took, bulk["latency"]))
                        print(f"{name}: small {took:.2f} s, n=16 request {bulk['latency']:.2f} s", flush=True)
            finally:
                gateway.stop()
    print(f"\n{'gateway':<22} {'1-token request s (median)':>27} {'n=16 x 24 tokens s (median)':>28}")
    for name, values in results.items():
        small = statistics.median(v[0] for v in values)
        big = statistics.median(v[1] for v in values)
        print(f"{name:<22} {small:>27.2f} {big:>28.2f}")
    print(f"\nload average {' '.join(Path('/proc/loadavg').read_text().split()[:3])} at the end")


if __name__ == "__main__":
    main()
