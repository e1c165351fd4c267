"""`gateway serve --workers 2` through real HTTP on the SGLang stand-in: requests spread over both processes,
/metrics sums them, and SIGTERM drains the streams of every process."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson
import pytest

from gateway.cli import main
from gateway.observability.process_metrics import counters_only, merge_expositions
from gateway.process.config import BackendConfig, ConfigError, GatewayConfig, ModelEntry, load_config
from gateway.process.group import ProcessGroup, listen
from gateway.process.policy_gate import backend_slots, policy_gate
from tests.gateway.http_server import serve
from tests.gateway.otlp_receiver import Collector
from tests.gateway.sglang_standin import Script, SGLangStandIn

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 12
LONG_TOKENS = 40
"""A stream still running (2 s at 50 ms a token) while the others and the listeners are done."""
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def group(tmp_path_factory, checkpoint) -> Iterator[tuple[str, list[Path], subprocess.Popen[bytes], SGLangStandIn]]:
    """A stand-in paced at 50 ms a token, and a group of two gateway processes in front of it."""
    standin = SGLangStandIn(incremental=True)
    ids = checkpoint.tokenizer.encode(" hello", add_special_tokens=False).ids
    standin.script = lambda body: Script(ids=ids * body["sampling_params"]["max_new_tokens"], delay=0.05)
    tmp = tmp_path_factory.mktemp("group")
    with serve(standin.app) as backend_url, _start_group(tmp, checkpoint, backend_url) as (url, sockets, proc):
        yield url, sockets, proc, standin


@contextmanager
def _start_group(
    tmp: Path, checkpoint, backend_url: str, *flags: str, config: str = "", env: dict[str, str] | None = None
) -> Iterator[tuple[str, list[Path], subprocess.Popen[bytes]]]:
    """`gateway serve --workers 2 --no-grammar-warmup` on the stand-in at `backend_url` (`config`: more of the config file), ready:
    its URL, the metrics sockets and the parent process; killed at the end if still running."""
    checkpoint.tokenizer.save(str(tmp / "tokenizer.json"))  # each process loads it faster than the GGUF
    path = tmp / "gateway.yaml"
    path.write_text(
        "models:\n  - id: m\n    family: hermes\n    checkpoint: tokenizer.json\n"
        f"    backend: {{type: sglang, url: '{backend_url}', incremental: true}}\n{config}"
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp / "gateway.log"
    argv = ["serve", "--port", str(port), "--config", str(path), "--workers", "2", "--log-level", "warning"]
    argv += ["--no-grammar-warmup", *flags]  # no grammar here: each process starts without importing xgrammar, torch
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", *argv], cwd=ROOT, stderr=out, env={**os.environ, **(env or {})}
        )
    url = f"http://127.0.0.1:{port}"
    try:
        yield url, _wait_ready(url, proc, log), proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> list[Path]:
    """Both processes answer /ready; the metrics sockets the parent announced."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        found = re.search(r"metrics sockets are in (\S+)", log.read_text())
        if found:
            sockets = [Path(found[1]) / f"process-{i}.sock" for i in range(2)]
            if all(s.exists() for s in sockets) and httpx.get(f"{url}/ready").status_code == 200:
                return sockets
        time.sleep(0.2)
    raise AssertionError(f"the group did not get ready:\n{log.read_text()}")


async def _process_metrics(path: Path) -> str:
    reader, writer = await asyncio.open_unix_connection(str(path))
    text = (await reader.read()).decode()
    writer.close()
    return text


def _value(text: str, sample: str) -> float:
    """The value of one sample line (0 when absent)."""
    found = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    return float(found[1]) if found else 0.0


CHAT_COUNT = f'gateway:requests_total{{model_name="m",route="{CHAT}",status="200",tenant="none"}}'
RUNNING = 'gateway:num_requests_running{model_name="m"}'


async def _stream(
    client: httpx.AsyncClient, url: str, started: asyncio.Event | None = None, max_tokens: int = TOKENS
) -> tuple[int, bool]:
    """One chat stream on its own connection: (content tokens, ended with [DONE]). Tokens are counted in the text
    (each is "hello"), not per chunk: on a loaded machine two backend events can arrive, and go out, as one."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, "stream": True}
    content, done = "", False
    async with client.stream("POST", f"{url}{CHAT}", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                choices = orjson.loads(line[6:])["choices"]
                content += "".join(c["delta"].get("content") or "" for c in choices)
                if started is not None and content:
                    started.set()
    return content.count("hello"), done


@pytest.mark.anyio
async def test_requests_spread_over_the_processes_and_metrics_sum_them(group):
    url, sockets, _, _ = group
    before = [_value(await _process_metrics(s), CHAT_COUNT) for s in sockets]
    async with httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0), timeout=30) as client:
        for rounds in range(1, ROUNDS + 1):  # 16 more streams while one process has served none (once in 32,768)
            results = await asyncio.gather(*(_stream(client, url) for _ in range(16)))
            assert results == [(TOKENS, True)] * 16
            served = [_value(await _process_metrics(s), CHAT_COUNT) - b for s, b in zip(sockets, before)]
            if all(n > 0 for n in served):
                break
        merged = (await client.get(f"{url}/metrics")).text
    assert all(n > 0 for n in served) and sum(served) == 16 * rounds, served
    assert _value(merged, CHAT_COUNT) == sum(before) + 16 * rounds


ROUNDS = 8
"""Tries at streams on both processes: SO_REUSEPORT picks a listener by a hash of each connection's addresses."""


def _accepts(port: int) -> bool:
    """Whether a new connection to the port is taken (refused once every listener is closed)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        return True
    except ConnectionRefusedError:
        return False


def _children(pid: int) -> set[int]:
    return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


@pytest.mark.anyio
async def test_merged_counters_do_not_go_down_when_a_process_dies_and_restarts(group):
    """A child killed after it served: while it is down and once its successor serves, the merged counter stays
    where it was (a counter that goes down reads as a reset); the successor's own counts add to its predecessor's."""
    url, sockets, proc, _ = group
    async with httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0), timeout=60) as client:
        assert await asyncio.gather(*(_stream(client, url) for _ in range(8))) == [(TOKENS, True)] * 8
        served = [_value(await _process_metrics(s), CHAT_COUNT) for s in sockets]
        total = _value((await client.get(f"{url}/metrics")).text, CHAT_COUNT)
        assert total == sum(served) and all(n > 0 for n in served), served
        children = _children(proc.pid)
        os.kill(max(children), signal.SIGKILL)
        seen = []
        deadline = time.monotonic() + 60
        while not (len(_children(proc.pid) - children) == 1 and all(s.exists() for s in sockets)):
            assert time.monotonic() < deadline, "the killed process was not restarted"
            seen.append(_value((await client.get(f"{url}/metrics")).text, CHAT_COUNT))  # the survivor answers
            await asyncio.sleep(0.1)
        seen.append(_value((await client.get(f"{url}/metrics")).text, CHAT_COUNT))
        assert len(seen) > 1 and all(n == total for n in seen), seen
        assert await _stream(client, url) == (TOKENS, True)
        assert _value((await client.get(f"{url}/metrics")).text, CHAT_COUNT) == total + 1
    assert sum([_value(await _process_metrics(s), CHAT_COUNT) for s in sockets]) == total + 1


@pytest.mark.anyio
async def test_sighup_without_tenant_policies_cuts_no_stream(group):
    """SIGHUP reloads policies; with none to reload it must not be the signal's default action, death."""
    url, _, proc, _ = group
    children = _children(proc.pid)
    started = [asyncio.Event() for _ in range(4)]
    async with httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0), timeout=30) as client:
        streams = [asyncio.create_task(_stream(client, url, e)) for e in started]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 20)
        os.kill(proc.pid, signal.SIGHUP)
        assert await asyncio.gather(*streams) == [(TOKENS, True)] * 4
    assert _children(proc.pid) == children


def test_a_second_group_cannot_take_a_port_a_group_listens_on():
    first = listen("127.0.0.1", 0, 2)
    try:
        with pytest.raises(OSError, match="in use"):
            for sock in listen("127.0.0.1", first[0].getsockname()[1], 2):
                sock.close()
    finally:
        for sock in first:
            sock.close()


def test_a_dead_process_counts_with_its_counters_and_histograms_only():
    text = (
        "# HELP gateway:requests_total r\n# TYPE gateway:requests_total counter\n"
        'gateway:requests_total{route="/a"} 3.0\n'
        "# HELP gateway:requests_created r\n# TYPE gateway:requests_created gauge\n"
        'gateway:requests_created{route="/a"} 20.0\n'
        "# HELP gateway:ttft_seconds t\n# TYPE gateway:ttft_seconds histogram\n"
        'gateway:ttft_seconds_bucket{le="+Inf"} 2.0\ngateway:ttft_seconds_count 2.0\ngateway:ttft_seconds_sum 0.5\n'
        "# HELP gateway:num_requests_running n\n# TYPE gateway:num_requests_running gauge\n"
        "gateway:num_requests_running 2.0\n"
    )
    kept = counters_only(text)
    assert "gateway:num_requests_running" not in kept
    assert kept == text[: text.index("# HELP gateway:num_requests_running")]


@pytest.mark.anyio
async def test_sigterm_drains_the_streams_of_every_process(group):
    url, sockets, proc, _ = group
    async with httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0), timeout=30) as client:
        for _ in range(ROUNDS):  # the kernel puts all 9 connections on one process once in 256: they end, and again
            started = [asyncio.Event() for _ in range(9)]
            streams = [asyncio.create_task(_stream(client, url, e)) for e in started[:8]]
            streams.append(asyncio.create_task(_stream(client, url, started[8], max_tokens=LONG_TOKENS)))
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 20)
            running = [_value(await _process_metrics(s), RUNNING) for s in sockets]
            if all(n > 0 for n in running):
                break
            await asyncio.gather(*streams)
        os.kill(proc.pid, signal.SIGTERM)
        port = int(url.rsplit(":", 1)[1])
        while await asyncio.to_thread(_accepts, port):  # until the listeners close (no drain delay here)
            await asyncio.sleep(0.05)
        draining = not streams[-1].done()
        results = await asyncio.gather(*streams)
    assert all(n > 0 for n in running) and sum(running) == 9, running
    assert draining, "a new connection was left waiting, unanswered, while the group drained"
    assert results == [(TOKENS, True)] * 8 + [(LONG_TOKENS, True)]
    assert await asyncio.to_thread(proc.wait, 30) == 0
    assert not any(s.exists() for s in sockets) and not sockets[0].parent.exists()


def test_a_process_exit_after_its_drain_is_not_cut_and_its_last_spans_go_out(tmp_path, checkpoint):
    """The parent waits for each child's whole exit, not only its drain (0 s here): the spans still queued, held 1 s
    by a collector that answers the first post 503 with retry-after: 1, go out before the group exits."""
    standin = SGLangStandIn(incremental=True)
    standin.script = lambda body: Script(ids=checkpoint.tokenizer.encode(" hi", add_special_tokens=False).ids)
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    with (
        serve(standin.app) as backend_url,
        Collector.running(refuse_first=1) as collector,
        _start_group(
            tmp_path,
            checkpoint,
            backend_url,
            "--drain-timeout",
            "0",
            config=f"tracing: {{endpoint: '{collector.url}'}}\n",
            env={"OTEL_BSP_SCHEDULE_DELAY": "600000"},  # every span waits in its process's queue until the exit
        ) as (url, _, proc),
    ):
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        headers = {"traceparent": f"00-{trace}-00f067aa0ba902b7-01"}
        assert httpx.post(f"{url}{CHAT}", json=body, headers=headers, timeout=30).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    assert collector.refused == 1
    assert any(s["name"] == f"POST {CHAT}" for s in collector.trace(trace))


@pytest.mark.anyio
async def test_a_child_that_dies_as_the_group_stops_is_not_started_again(caplog):
    """SIGTERM during the pause before a restart: the new child would never get it, serve on and be killed late."""
    sock = listen("127.0.0.1", 0, 1)[0]
    group = ProcessGroup(["serve", "--no-such-flag"], [sock], {}, stop_after_s=30)  # a child would exit at once
    started = []
    start = group._start
    group._start = lambda role: started.append(role) or start(role)
    group.children = [group._start(group._roles[0])]
    group._roles[0].metrics_socket().touch()  # as if it had served: its death is a crash to restart after
    group.children[0].kill()
    with caplog.at_level(logging.ERROR, logger="gateway.process.group"):
        watch = asyncio.create_task(group._watch())
        while "starting a new one" not in caplog.text:
            await asyncio.sleep(0.01)
        group._stop()
        await watch
    sock.close()
    shutil.rmtree(group._dir)
    assert len(started) == 1


def test_merged_metrics_sum_counts_and_keep_the_worst_replica_view():
    one = (
        "# HELP gateway:requests_total r\n# TYPE gateway:requests_total counter\n"
        'gateway:requests_total{route="/a"} 3.0\n'
        "# HELP gateway:requests_created r\n# TYPE gateway:requests_created gauge\n"
        'gateway:requests_created{route="/a"} 20.0\n'
        "# HELP gateway:ttft_seconds t\n# TYPE gateway:ttft_seconds histogram\n"
        'gateway:ttft_seconds_bucket{le="0.1"} 1.0\ngateway:ttft_seconds_bucket{le="+Inf"} 2.0\n'
        "gateway:ttft_seconds_count 2.0\ngateway:ttft_seconds_sum 0.5\n"
        "# HELP gateway:backend_healthy h\n# TYPE gateway:backend_healthy gauge\n"
        'gateway:backend_healthy{replica="x"} 1.0\n'
        "# HELP gateway:backend_circuit_breaker_state b\n# TYPE gateway:backend_circuit_breaker_state gauge\n"
        'gateway:backend_circuit_breaker_state{replica="x"} 0.0\n'
        "# HELP gateway:num_requests_running n\n# TYPE gateway:num_requests_running gauge\n"
        "gateway:num_requests_running 2.0\n"
    )
    assert merge_expositions([one]).decode() == one
    other = (
        one.replace("} 3.0", "} 4.0")
        .replace("20.0", "10.0")
        .replace('{replica="x"} 1.0', '{replica="x"} 0.0')
        .replace('state{replica="x"} 0.0', 'state{replica="x"} 2.0')
    )
    merged = merge_expositions([one, other]).decode()
    assert _value(merged, 'gateway:requests_total{route="/a"}') == 7
    assert _value(merged, 'gateway:requests_created{route="/a"}') == 10
    assert _value(merged, 'gateway:ttft_seconds_bucket{le="+Inf"}') == 4
    assert _value(merged, "gateway:ttft_seconds_sum") == 1.0
    assert _value(merged, 'gateway:backend_healthy{replica="x"}') == 0
    assert _value(merged, 'gateway:backend_circuit_breaker_state{replica="x"}') == 2
    assert _value(merged, "gateway:num_requests_running") == 4


def test_a_group_with_policies_needs_redis(tmp_path, capsys):
    assert main(["serve", "--workers", "2", "--policies", str(tmp_path)]) == 2
    assert "need --redis" in capsys.readouterr().err


def test_the_config_file_names_the_process_count(tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text("models:\n  - id: m\n    backend: {type: none}\nserver: {workers: 3}\n")
    assert load_config(path).server.workers == 3
    path.write_text("models:\n  - id: m\n    backend: {type: none}\nserver: {workers: 0}\n")
    with pytest.raises(ConfigError, match=r"server\.workers: a positive integer"):
        load_config(path)


def test_a_models_backend_slots_are_divided_exactly_among_the_groups_processes(tmp_path):
    """Each process had a fair queue of the model's whole `max_running`: N processes sent N times what the backends
    run at once. Each now holds its share, the remainder to the first ones."""
    entry = ModelEntry("m", max_running=10)
    assert [backend_slots(entry, i, 4) for i in range(4)] == [3, 3, 2, 2]
    worker = ModelEntry("w", backend=BackendConfig(type="worker"))  # a bundled worker's batch: 8 by default
    assert [backend_slots(worker, i, 3) for i in range(3)] == [3, 3, 2] and backend_slots(worker) == 8
    config = GatewayConfig(models=[entry, worker])
    queues = [policy_gate(tmp_path, None, tmp_path / "audit.jsonl", config, process=(i, 3)).queues for i in range(3)]
    assert [q["m"].capacity for q in queues] == [4, 3, 3] and sum(q["w"].capacity for q in queues) == 8


def test_a_group_larger_than_a_models_backend_slots_is_refused(tmp_path, capsys):
    path = tmp_path / "gateway.yaml"
    path.write_text("models:\n  - id: m\n    max_running: 2\n    backend: {type: none}\n")
    group = ["serve", "--config", str(path), "--workers", "3", "--policies", str(tmp_path), "--redis", "redis://r:1"]
    assert main(group) == 2
    assert "models[0].max_running: 2 backend slots of 'm' cannot be divided among 3" in capsys.readouterr().err
