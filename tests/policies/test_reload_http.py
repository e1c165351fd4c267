"""Hot reload on a real gateway under a client loop that must never fail: files edited in place, added,
removed and broken, published as a Kubernetes ConfigMap publishes them (an atomic swap of `..data`),
requests in flight keeping the policy they were admitted under, and SIGHUP reloading at once."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.faults.conftest import FaultBackend, sse
from tests.policies.deployment import auth, chat, models_config, policy_gateway, write_tenant

RELOAD_S = 10.0
"""Upper bound for a change to take effect (measured: see docs/tenants.md); never a speed check."""


class ConfigMapDir:
    """A directory laid out as the kubelet mounts a ConfigMap: `..data` → a versioned directory, and one
    link per file into `..data`; `publish()` swaps all files at once, as the kubelet does."""

    def __init__(self, root: Path, staging: Path):
        self.root = root
        self.staging = staging
        self.version = 0
        root.mkdir()
        staging.mkdir()

    def publish(self) -> None:
        self.version += 1
        new = self.root / f"..2026_11_30_{self.version:04d}"
        shutil.copytree(self.staging, new)
        old = os.readlink(self.root / "..data") if (self.root / "..data").is_symlink() else None
        (self.root / "..data_tmp").symlink_to(new.name)
        os.replace(self.root / "..data_tmp", self.root / "..data")
        names = {p.name for p in self.staging.iterdir()}
        for name in names:
            if not (self.root / name).is_symlink():
                (self.root / name).symlink_to(f"..data/{name}")
        for link in self.root.iterdir():
            if link.is_symlink() and not link.name.startswith("..") and link.name not in names:
                link.unlink()
        if old:
            shutil.rmtree(self.root / old)

    @property
    def live(self) -> Path:
        """The directory the files are in now (editing it is an in-place edit)."""
        return self.root / "..data"


@pytest.fixture(scope="module")
def deployment(smollm2: Path, standin_backend: FaultBackend, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("reload")
    mount = ConfigMapDir(root / "mount", root / "staging")
    write_tenant(mount.staging, "steady", models=["m"], limits={"max_tokens": 2})
    write_tenant(mount.staging, "leaver", models=["m"])
    write_tenant(mount.staging, "hup", models=["m"])
    write_tenant(mount.staging, "watcher", metrics=True)
    mount.publish()
    backend = standin_backend
    config = models_config(root / "gateway.yaml", smollm2, backend.url, ["m"])
    with policy_gateway(config, mount.root, "--audit-log", str(root / "audit")) as gateway:
        yield gateway, mount, backend


@pytest.fixture
def loop(deployment) -> Iterator[Counter]:
    """Two clients of tenant `steady` sending requests back to back; counts (status, completion tokens)."""
    gateway = deployment[0]
    seen: Counter = Counter()
    stop = threading.Event()

    def run() -> None:
        with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
            while not stop.is_set():
                r = client.post("/v1/chat/completions", headers=auth("steady"), json=chat("m", max_tokens=None))
                seen[(r.status_code, r.json()["usage"]["completion_tokens"] if r.status_code == 200 else None)] += 1

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    yield seen
    stop.set()
    for thread in threads:
        thread.join()


def status(gateway, tenant: str) -> int:
    return httpx.get(f"{gateway.base_url}/v1/models", headers=auth(tenant), timeout=30).status_code


def wait_until(condition) -> float:
    """Seconds until `condition` held."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < RELOAD_S, "the change did not take effect"
        time.sleep(0.02)
    return time.monotonic() - started


def test_edits_additions_removals_and_broken_files_under_load(deployment, loop, capsys):
    gateway, mount, _ = deployment
    wait_until(lambda: loop[(200, 2)] >= 5)
    took = {}
    # an edit in place: the ceiling (and so the default max tokens) goes from 2 to 3
    write_tenant(mount.live, "steady", models=["m"], limits={"max_tokens": 3})
    took["edit in place"] = wait_until(lambda: loop[(200, 3)] >= 2)
    # a new tenant, published as a ConfigMap update (which carries the edit too)
    write_tenant(mount.staging, "steady", models=["m"], limits={"max_tokens": 3})
    write_tenant(mount.staging, "newcomer", models=["m"])
    mount.publish()
    took["add (..data swap)"] = wait_until(lambda: status(gateway, "newcomer") == 200)
    # a broken file: its last good version stays, the log names file and line
    (mount.staging / "steady.yaml").write_text((mount.staging / "steady.yaml").read_text() + "priority: urgent\n")
    mount.publish()
    wait_until(lambda: "steady.yaml:" in gateway.stderr() and "priority" in gateway.stderr())
    before = loop[(200, 3)]
    wait_until(lambda: loop[(200, 3)] >= before + 5)
    # removal
    (mount.staging / "newcomer.yaml").unlink()
    mount.publish()
    took["remove (..data swap)"] = wait_until(lambda: status(gateway, "newcomer") == 401)
    assert set(loop) <= {(200, 2), (200, 3)}, loop  # not one request of the loop failed
    with capsys.disabled():
        print(f"\nreload took: {', '.join(f'{k} {v:.2f} s' for k, v in took.items())}")


def test_a_request_in_flight_keeps_the_policy_it_was_admitted_under(deployment):
    gateway, mount, backend = deployment
    backend.set(mode="ok", delay=0.05)
    try:
        with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
            body = chat("m", max_tokens=20, stream=True)
            with client.stream("POST", "/v1/chat/completions", headers=auth("leaver"), json=body) as response:
                events = sse(response)
                assert response.status_code == 200 and isinstance(next(events), dict)
                (mount.staging / "leaver.yaml").unlink()
                mount.publish()
                wait_until(lambda: status(gateway, "leaver") == 401)
                rest = list(events)
    finally:
        backend.set(mode="ok")
    assert rest[-1] == "[DONE]"
    assert [c["finish_reason"] for e in rest[:-1] for c in e["choices"] if c["finish_reason"]] == ["length"]


def test_a_rewrite_that_keeps_size_and_mtime_is_reloaded_and_sighup_reloads_at_once(deployment):
    """A rewrite in place that keeps the size, inode and mtime (`touch -r`) changes the ctime, which the watcher's look
    now compares: reloaded by the poll (it waited for SIGHUP). SIGHUP reloads with nothing changed too (counted)."""
    gateway, mount, _ = deployment
    path = mount.live / "hup.yaml"
    assert status(gateway, "hup") == 200 and _models(gateway, "hup") == ["m"]
    stat = path.stat()
    with open(path, "r+") as f:
        text = f.read()
        f.seek(0)
        f.write(text.replace("models:\n- m", "models:\n- x"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    wait_until(lambda: _models(gateway, "hup") == [])
    reloads = _reloads(gateway)
    os.kill(gateway.proc.pid, signal.SIGHUP)  # nothing changed: no poll would reload
    wait_until(lambda: _reloads(gateway) > reloads)


def _reloads(gateway) -> float:
    """The gateway's policy reloads so far, each outcome (a file broken by another test makes them failures) counted
    (`/metrics`, read with the key of a tenant allowed to)."""
    text = httpx.get(f"{gateway.base_url}/metrics", headers=auth("watcher"), timeout=30).text
    return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith("gateway:policy_reloads_total{"))


def _models(gateway, tenant: str) -> list[str]:
    response = httpx.get(f"{gateway.base_url}/v1/models", headers=auth(tenant), timeout=30)
    return [m["id"] for m in response.json()["data"]]
