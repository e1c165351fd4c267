"""The in-chart Redis requires a password, the gateway gets it, and neither takes it from its command line: the
generated Secret, a Secret of the operator's own, and the real redis-server and redis-cli run with what the chart
renders."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import time

import pytest
import yaml

from tests.helm.chart import (
    CHART,
    NAMESPACE,
    RELEASE,
    find,
    gateway_container,
    gateway_deployment,
    helm,
    one,
    quantity_bytes,
    render,
)
from tests.helm.fake_apiserver import fake_apiserver
from tests.redis_server import _free_port

AUTH_SECRET = f"{RELEASE}-llm-gateway-redis-auth"
CHECKSUM_KEY_SECRET = f"{RELEASE}-llm-gateway-checksum-key"


def _redis(docs: list[dict]) -> tuple[dict, dict]:
    """The in-chart Redis' pod template and container."""
    template = one(docs, "StatefulSet")["spec"]["template"]
    return template, template["spec"]["containers"][0]


def _secret_refs(container: dict) -> dict[str, dict]:
    return {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}


def test_the_in_chart_redis_requires_the_generated_password_the_gateway_gets():
    docs = render("redis-inchart.yaml")
    password = _password(docs)
    assert re.fullmatch(r"[A-Za-z0-9]{32}", password)
    template, redis = _redis(docs)
    ref = {"name": AUTH_SECRET, "key": "password"}
    assert _secret_refs(redis) == {"REDIS_PASSWORD": ref, "REDISCLI_AUTH": ref}
    assert redis["args"][redis["args"].index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    assert _secret_refs(gateway_container(docs))["LLM_GATEWAY_REDIS_PASSWORD"] == ref
    gateway = gateway_deployment(docs)["spec"]["template"]
    # a password drawn anew (its Secret deleted) rolls Redis and the gateway together
    checksums = {t["metadata"]["annotations"]["checksum/redis-auth"] for t in (template, gateway)}
    assert len(checksums) == 1 and password not in str(docs[1:])


def _password(docs: list[dict]) -> str:
    return base64.b64decode(one(docs, "Secret", AUTH_SECRET)["data"]["password"]).decode()


def test_an_upgrade_keeps_the_password_the_cluster_holds(tmp_path):
    """`helm upgrade` reads the Secret back (`lookup`, here from an API server that holds it): the same password,
    the same checksums, so neither Redis nor the gateway pods roll; a first install draws a new one."""
    kept, key = "the-password-an-earlier-install-drew", "the-checksum-key-an-earlier-install-drew"
    secrets = [_kept_secret(AUTH_SECRET, "password", kept), _kept_secret(CHECKSUM_KEY_SECRET, "key", key)]
    server_side = ("--dry-run=server", "--disable-openapi-validation", "-n", NAMESPACE, "--set", "redis.enabled=true")
    with fake_apiserver(secrets, tmp_path) as kubeconfig:
        done = helm("template", RELEASE, str(CHART), *server_side, "--kubeconfig", str(kubeconfig))
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert _password(docs) == kept
    assert base64.b64decode(one(docs, "Secret", CHECKSUM_KEY_SECRET)["data"]["key"]).decode() == key
    template, _ = _redis(docs)
    gateway = gateway_deployment(docs)["spec"]["template"]
    for pods in (template, gateway):
        assert pods["metadata"]["annotations"]["checksum/redis-auth"] == _keyed_sha256(key, kept)
    assert _password(render(None, "redis.enabled=true")) != kept


def _kept_secret(name: str, field: str, value: str) -> dict:
    """A Secret as an earlier release left it (helm checks it owns what exists)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": RELEASE, "meta.helm.sh/release-namespace": NAMESPACE},
        },
        "data": {field: base64.b64encode(value.encode()).decode()},
    }


def _keyed_sha256(key: str, content: str) -> str:
    """The chart's checksum of what a Secret holds: sha256(key + sha256(key + content)), hex."""
    inner = hashlib.sha256((key + content).encode()).hexdigest()
    return hashlib.sha256((key + inner).encode()).hexdigest()


def test_a_password_secret_of_ones_own_serves_the_in_chart_and_an_external_redis():
    ref = {"name": "redis-pass", "key": "redis-password"}
    sets = ("redis.auth.existingSecret=redis-pass", "redis.auth.existingSecretKey=redis-password")
    docs = render("redis-inchart.yaml", *sets)
    assert find(docs, "Secret", AUTH_SECRET) == []
    template, redis = _redis(docs)
    assert _secret_refs(redis) == {"REDIS_PASSWORD": ref, "REDISCLI_AUTH": ref}
    assert "checksum/redis-auth" not in template["metadata"].get("annotations", {})
    assert _secret_refs(gateway_container(docs))["LLM_GATEWAY_REDIS_PASSWORD"] == ref
    external = gateway_container(render("redis-external.yaml", *sets))
    assert _secret_refs(external)["LLM_GATEWAY_REDIS_PASSWORD"] == ref
    assert "LLM_GATEWAY_REDIS_PASSWORD" not in _secret_refs(gateway_container(render("redis-external.yaml")))
    unused = helm("template", RELEASE, str(CHART), "--set", sets[0], check=False)
    assert unused.returncode != 0 and "no Redis to use it with" in unused.stderr


def test_the_gateway_refuses_a_second_redis_flag():
    """The URL comes from the environment: an extra --redis would silently win over it."""
    done = helm(
        "template",
        RELEASE,
        str(CHART),
        "--set",
        "redis.enabled=true",
        "--set",
        "gateway.extraArgs={--redis,x}",
        check=False,
    )
    assert done.returncode != 0 and "gateway.extraArgs: --redis is already passed by the chart" in done.stderr


@pytest.mark.parametrize("limit", ["256Mi", "1.5Gi", "1G"])
def test_the_in_chart_redis_evicts_below_its_memory_limit(limit: str):
    """Every key the gateway writes expires (stored Responses after 30 days): unbounded, Redis grows to its limit, is
    killed and restarts empty, limits and stored Responses lost; bounded, the least recently used keys go first."""
    _, redis = _redis(render("redis-inchart.yaml", f"redis.resources.limits.memory={limit}"))
    args = redis["args"]
    assert int(args[args.index("--maxmemory") + 1]) == int(quantity_bytes(limit) * 3 // 4)
    assert args[args.index("--maxmemory-policy") + 1] == "volatile-lru"
    _, unlimited = _redis(render("redis-inchart.yaml", "redis.resources.limits=null"))
    assert "--maxmemory" not in unlimited["args"]


def _ready(probe: list[str], env: dict[str, str]) -> bool:
    return subprocess.run(probe, env=env, capture_output=True, timeout=10, check=False).returncode == 0


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli comes with redis-server")
def test_the_real_redis_runs_with_the_rendered_arguments_and_its_probe_needs_the_password(tmp_path):
    """redis-server takes the rendered arguments ($(REDIS_PASSWORD) expanded as the kubelet does) and requires the
    password; the probe passes with REDISCLI_AUTH and fails without it or with another (redis-cli itself exits 0
    on an error reply: the probe checks for PONG)."""
    port = _free_port()
    docs = render("redis-inchart.yaml", f"redis.port={port}")
    password = _password(docs)
    _, redis = _redis(docs)
    args = [a.replace("$(REDIS_PASSWORD)", password) for a in redis["args"]]
    args[args.index("--dir") + 1] = str(tmp_path)
    probe = redis["readinessProbe"]["exec"]["command"]
    assert probe == redis["startupProbe"]["exec"]["command"]
    env = {"PATH": os.environ["PATH"]}
    server = subprocess.Popen(
        [*redis["command"], *args, "--bind", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(200):  # the startup probe's retries
            if _ready(probe, {**env, "REDISCLI_AUTH": password}):
                break
            assert server.poll() is None, "redis-server refused the rendered arguments"
            time.sleep(0.02)
        else:
            pytest.fail("the probe never passed")
        assert not _ready(probe, env)
        assert not _ready(probe, {**env, "REDISCLI_AUTH": "not-the-password"})
    finally:
        server.kill()
        server.wait()
