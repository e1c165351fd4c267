"""Policy hot reload: the CPU time of one `PolicyStore.reload()` over N tenant files (and a `_defaults.yaml`).

Rows, for each --tenants count: the first load (every file read and parsed), a reload after one tenant's file
changed, after `_defaults.yaml` changed (a limit every tenant inherits: every tenant re-derived), with nothing changed, and a verifying reload (what
SIGHUP does: every file read again and compared by content). CPU seconds are `time.process_time()` of this process,
the median of --repeats reloads (each after its own change). The files are written, then left --settle-s seconds
(what a reload needs to trust a file's stat), as the files of a running gateway are.

    python bench/policy_reload_bench.py [--tenants 500,2000] [--repeats 5] [--settle-s 2.1]

Runs against the tree on PYTHONPATH (run it with the old tree for a before/after).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from policies.store import PolicyStore

DEFAULTS = """models: ["smollm2-*"]
limits:
  requests_per_minute: 600
  tokens_per_minute: 200000
  concurrent_requests: 16
  max_tokens: {max_tokens}
tools:
  strict: client
priority: interactive
on_store_error: closed
"""


def tenant_text(i: int, rpm: int = 60) -> str:
    """One tenant's file: two keys (one expiring), models, its own limits, a model's limits, tools."""
    sha = [hashlib.sha256(f"key-{i}-{k}".encode()).hexdigest() for k in range(2)]
    return f"""tenant: tenant-{i}
keys:
  - id: ci-bot
    sha256: {sha[0]}
    expires: 2027-06-30
  - id: laptop
    sha256: {sha[1]}
models: ["smollm2-*", "deepseek-v4.1"]
limits:
  requests_per_minute: {rpm}
  tokens_per_day: 5000000
  models:
    deepseek-v4.1: {{requests_per_minute: 20, tokens_per_minute: 100000, concurrent_requests: 4}}
tools:
  allow: ["get_*", "search"]
"""


def cpu_s(action: Callable[[], object]) -> float:
    start = time.process_time()
    action()
    return time.process_time() - start


def measure(tenants: int, repeats: int, settle_s: float) -> dict[str, float]:
    """Median CPU seconds of each kind of reload over a directory of `tenants` files."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "_defaults.yaml").write_text(DEFAULTS.format(max_tokens=4096))
        for i in range(tenants):
            (directory / f"tenant-{i}.yaml").write_text(tenant_text(i))
        time.sleep(settle_s)
        store = PolicyStore(directory)
        out = {"first load": cpu_s(store.reload)}
        verifying = "verify" in inspect.signature(store.reload).parameters
        rows: dict[str, list[float]] = {"one file changed": [], "_defaults.yaml changed": [], "nothing changed": []}
        rows["SIGHUP (verify every file)"] = []
        for r in range(repeats):
            (directory / f"tenant-{r}.yaml").write_text(tenant_text(r, rpm=61 + r))
            rows["one file changed"].append(cpu_s(store.reload))
            (directory / "_defaults.yaml").write_text(DEFAULTS.format(max_tokens=4097 + r))
            rows["_defaults.yaml changed"].append(cpu_s(store.reload))
            time.sleep(settle_s)  # the changed files settle: a reload then trusts their stat again
            store.reload()
            rows["nothing changed"].append(cpu_s(store.reload))
            forced = (lambda: store.reload(verify=True)) if verifying else store.reload
            rows["SIGHUP (verify every file)"].append(cpu_s(forced))
        assert store.errors == [] and len(store.tenants) == tenants, store.errors[:3]
        last = store.tenants[f"tenant-{repeats - 1}"].limits
        assert (last.requests_per_minute, last.max_tokens) == (61 + repeats - 1, 4097 + repeats - 1)
        out.update({name: statistics.median(values) for name, values in rows.items()})
        return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", default="500,2000", help="comma-separated tenant counts")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--settle-s", type=float, default=2.1)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.tenants.split(",")]
    results = {n: measure(n, args.repeats, args.settle_s) for n in counts}
    header = "| reload | " + " | ".join(f"{n} tenants (CPU-s)" for n in counts) + " |"
    print(header)
    print("|" + "---|" * (len(counts) + 1))
    for name in results[counts[0]]:
        print(f"| {name} | " + " | ".join(f"{results[n][name]:.4f}" for n in counts) + " |")


if __name__ == "__main__":
    main()
