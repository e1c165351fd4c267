"""helm-unittest-style checks over the rendered YAML: restricted pods, probes, drain timing, selectors that match,
NetworkPolicies that mean what they say, checksums that roll pods for config but not for policies, no raw key, names
that fit 63 characters."""

from __future__ import annotations

import json
import math
import re
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from backends.checkpoint import EMBEDDED_MODEL_ID
from gateway.process.group import exit_after_drain_s
from gateway.process.supervisor import WORKER_STOP_GRACE_S
from policies.policy import DEFAULT_QUEUE_TIMEOUT_S
from tests.helm.chart import (
    CHART,
    EXTRA_PREFIX,
    LONG_RELEASE,
    RELEASE,
    VALID,
    VALUES,
    find,
    gateway_config,
    gateway_container,
    gateway_deployment,
    helm,
    one,
    pod_templates,
    quantity_bytes,
    render,
    render_again,
    render_text,
    selects,
)

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


def _enabled(values: str, section: str) -> bool:
    return bool((yaml.safe_load((VALUES / values).read_text()) or {}).get(section, {}).get("enabled"))


WITH_NETWORK_POLICY = [v for v in VALID if _enabled(v, "networkPolicy")]


def _isolated_by_default(values: str) -> bool:
    """Bundled workers or the in-chart Redis under the default policies alone (no gateway policy)."""
    config = yaml.safe_load((VALUES / values).read_text()) or {}
    isolating = config.get("networkPolicy", {}).get("isolateWorkersAndRedis", True)
    workers = any(m["backend"]["type"] == "worker" for m in config.get("models", []))
    return isolating and (workers or config.get("redis", {}).get("enabled", False))


def _arg(container: dict, flag: str) -> str:
    args = container["args"]
    return args[args.index(flag) + 1]


def _component(labels: dict) -> str:
    return labels["app.kubernetes.io/component"]


@pytest.mark.parametrize("values", VALID)
def test_every_pod_is_restricted(values: str):
    """Non-root, read-only root filesystem, no capabilities, RuntimeDefault seccomp, no host namespaces, no token."""
    for workload, template in pod_templates(render(values)):
        where = f"{values}: {workload['kind']} {workload['metadata']['name']}"
        spec = template["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        assert spec["securityContext"]["runAsUser"] > 0, where
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        # fsGroup would otherwise chown every file of the model volume (or Redis' data) at each start
        assert spec["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch", where
        assert not any(spec.get(k) for k in ("hostIPC", "hostPID", "hostNetwork")), where
        assert spec["automountServiceAccountToken"] is False, where
        for container in spec["containers"] + spec.get("initContainers", []):
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert not sc.get("privileged"), where
        writable = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v}
        writable |= {c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])}
        for container in spec["containers"]:
            for mount in container.get("volumeMounts", []):
                if mount["name"] not in writable:
                    assert mount.get("readOnly") is True, f"{where}: {mount['mountPath']} is writable"


@pytest.mark.parametrize("values", VALID)
def test_no_pod_gets_a_variable_per_service_of_the_namespace(values: str):
    """Service links add a dozen variables per Service of the namespace to every pod: nothing here reads them."""
    for workload, template in pod_templates(render(values)):
        assert template["spec"]["enableServiceLinks"] is False, f"{values}: {workload['metadata']['name']}"


@pytest.mark.parametrize("values", ["redis-inchart.yaml", "gpu-worker.yaml"])
def test_every_pod_pulls_with_the_image_pull_secrets(values: str):
    """A private registry (a mirror, an air-gapped cluster) serves every image: the gateway's, the workers', Redis'."""
    docs = render(values, extra="imagePullSecrets: [{name: registry}]\n")
    for workload, template in pod_templates(docs):
        assert template["spec"]["imagePullSecrets"] == [{"name": "registry"}], workload["metadata"]["name"]


@pytest.mark.parametrize("values", VALID)
def test_mount_paths_and_env_names_are_distinct_and_the_audit_folder_writable(values: str):
    """The API server refuses a pod with two volumes on one path, server-side apply an env list naming a variable
    twice; the audit file's folder must be an emptyDir."""
    for _, template in pod_templates(render(values)):
        spec = template["spec"]
        writable = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v}
        for container in spec["containers"]:
            names = [e["name"] for e in container.get("env", [])]
            assert len(names) == len(set(names)), f"{values}: {container['name']} {names}"
            mounts = {m["mountPath"].rstrip("/"): m["name"] for m in container.get("volumeMounts", [])}
            assert len(mounts) == len(container.get("volumeMounts", [])), f"{values}: {container['name']} {mounts}"
            if "--audit-log" in container.get("args", []):
                folder = str(Path(_arg(container, "--audit-log")).parent)
                assert mounts.get(folder) in writable, f"{values}: {folder} is not an emptyDir"


def test_extra_volumes_reach_the_gateway_and_the_workers():
    """A private CA for https backends (gateway) and a cache folder (worker), beside the chart's own volumes."""
    gateway = gateway_deployment(render("networkpolicy-on.yaml"))["spec"]["template"]["spec"]
    assert {"name": "corp-ca", "configMap": {"name": "corp-ca-bundle"}} in gateway["volumes"]
    mount = {"name": "corp-ca", "mountPath": "/etc/ssl/corp", "readOnly": True}
    assert mount in gateway["containers"][0]["volumeMounts"]
    worker = one(render("gpu-worker.yaml"), "Deployment", "gw-llm-gateway-llama-3-2-1b-instruct")["spec"]["template"]
    assert {"name": "triton-cache", "emptyDir": {"sizeLimit": "2Gi"}} in worker["spec"]["volumes"]
    assert {"name": "triton-cache", "mountPath": "/var/cache/triton"} in worker["spec"]["containers"][0]["volumeMounts"]
    clash = {"gateway": {"extraVolumes": [{"name": "tmp", "emptyDir": {}}]}}
    done = helm("template", RELEASE, str(CHART), "--set-json", f"gateway={json.dumps(clash['gateway'])}", check=False)
    assert done.returncode != 0 and "gateway.extraVolumes: a volume named tmp is already there" in done.stderr


@pytest.mark.parametrize(
    ("audit_log", "refusal"),
    [("/audit.log", "the root filesystem is read-only"), ("/etc/llm-gateway/config/a.log", "two volumes would mount")],
)
def test_an_audit_file_beside_a_read_only_mount_is_refused(audit_log: str, refusal: str):
    sets = ["--set", "policies.enabled=true", "--set", f"gateway.auditLogFile={audit_log}"]
    done = helm("template", RELEASE, str(CHART), *sets, check=False)
    assert done.returncode != 0 and refusal in done.stderr


@pytest.mark.parametrize(
    ("sets", "volume"),
    [
        ([], {"name": "audit", "emptyDir": {"sizeLimit": "1Gi"}}),
        (["gateway.auditLogSizeLimit=300Mi"], {"name": "audit", "emptyDir": {"sizeLimit": "300Mi"}}),
        (["gateway.auditLogSizeLimit=null"], {"name": "audit", "emptyDir": {}}),
    ],
)
def test_an_audit_file_in_a_folder_of_its_own_is_bounded(sets: list[str], volume: dict):
    """The gateway appends to its audit file and never rotates it: its emptyDir has a sizeLimit unless set null."""
    audit = ["policies.enabled=true", "gateway.auditLogFile=/var/log/llm-gateway/audit.jsonl"]
    pod = gateway_deployment(render(None, *audit, *sets))["spec"]["template"]["spec"]
    assert [v for v in pod["volumes"] if v["name"] == "audit"] == [volume]
    assert {"name": "audit", "mountPath": "/var/log/llm-gateway"} in pod["containers"][0]["volumeMounts"]


@pytest.mark.parametrize("values", VALID)
def test_probes_on_the_right_paths_and_ports(values: str):
    for workload, template in pod_templates(render(values)):
        container = template["spec"]["containers"][0]
        component = _component(template["metadata"]["labels"])
        if component == "redis":
            ping = f'[ "$(redis-cli -p {container["ports"][0]["containerPort"]} ping)" = PONG ]'
            assert container["readinessProbe"]["exec"]["command"] == ["sh", "-c", ping]
            continue
        ready = {"gateway": "/ready", "worker": "/health"}[component]
        expected = {"startupProbe": "/health", "livenessProbe": "/health", "readinessProbe": ready}
        for probe, path in expected.items():
            assert container[probe]["httpGet"] == {"path": path, "port": "http"}, f"{values}: {component} {probe}"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["http"] == int(_arg(container, "--port")), f"{values}: {component} listens elsewhere"


EMBEDDED_PEAK_MIB = 2336
"""Gateway + embedded worker + grammar compile child, anonymous memory (summed Pss_Anon) at peak under 10
concurrent chat requests of 1,500 words and max_tokens 200 (2026-12-01, the CPU demo's config)."""


@pytest.mark.parametrize("values", VALID)
def test_a_pod_serving_the_embedded_model_has_the_memory_it_takes(values: str):
    """The embedded model's worker runs inside the gateway container, under its memory limit: below its peak the
    kernel kills the worker mid-request (the default install is the CPU demo)."""
    docs = render(values)
    if any(m["backend"]["type"] == "worker" for m in yaml.safe_load(gateway_config(docs))["models"]):
        limit = gateway_container(docs)["resources"]["limits"]["memory"]
        assert quantity_bytes(limit) >= 1.2 * EMBEDDED_PEAK_MIB * 2**20, f"{values}: {limit}"


def _longest_request_s(docs: list[dict], policy_queues: bool = True) -> float:
    """The longest a request may take in the gateway: its longest model deadline, the longest wait in a fair queue
    (with policies: the gateway's default 30 s, or the longest of the rendered policies), 30 s to plan."""
    deadlines = [m["backend"].get("request_timeout_s", 0) for m in yaml.safe_load(gateway_config(docs))["models"]]
    queue = 0
    if "--policies" in gateway_container(docs)["args"]:
        policies = [d for d in docs if d["metadata"]["name"].endswith("-policies")] if policy_queues else []
        files = [yaml.safe_load(body) for d in policies for body in (d.get("data") or d.get("stringData")).values()]
        queue = max([DEFAULT_QUEUE_TIMEOUT_S] + [(f or {}).get("limits", {}).get("queue_timeout_s", 0) for f in files])
    return max(deadlines) + queue + 30


@pytest.mark.parametrize("values", VALID)
def test_termination_grace_covers_the_drain(values: str):
    """A rollout or a node drain cuts no request the gateway still serves: by default the drain lasts as long as a
    request may (its deadline, its fair-queue wait), and the pod's grace period covers the drain and the exit after
    it (each embedded worker stopped in turn, the settlements Redis missed tried again at the rendered
    --redis-timeout, the spans' flush), with a margin; a bundled worker's drain lasts its model's deadline."""
    docs = render(values)
    container = gateway_container(docs)
    drain = float(_arg(container, "--drain-timeout"))
    assert drain >= _longest_request_s(docs, policy_queues=False), f"{values}: a rollout cuts requests past {drain}s"
    drain += float(_arg(container, "--drain-delay"))
    embedded = sum(m["backend"]["type"] == "worker" for m in yaml.safe_load(gateway_config(docs))["models"])
    redis_timeout = float(_arg(container, "--redis-timeout")) if "--redis-timeout" in container["args"] else None
    longest = drain + embedded * WORKER_STOP_GRACE_S + exit_after_drain_s(redis_timeout)
    grace = gateway_deployment(docs)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= longest + 5, f"{values}: SIGKILL after {grace}s would cut an exit of up to {longest}s"
    deadlines = {
        m["backend"]["dns"]["host"].split(".")[0]: m["backend"]["request_timeout_s"]
        for m in yaml.safe_load(gateway_config(docs))["models"]
        if m["backend"].get("incremental")
    }
    for workload, template in pod_templates(docs):  # a bundled worker's streams in flight when it is replaced
        if _component(template["metadata"]["labels"]) == "worker":
            name = workload["metadata"]["name"]
            drain = float(_arg(template["spec"]["containers"][0], "--drain-timeout"))
            grace = template["spec"]["terminationGracePeriodSeconds"]
            assert drain >= deadlines[name] and grace >= drain + 5, f"{values}: {name}: {drain}, {grace}"


@pytest.mark.parametrize("values", VALID)
def test_services_and_budgets_select_their_pods(values: str):
    docs = render(values)
    templates = [t for _, t in pod_templates(docs)]
    for service in find(docs, "Service"):
        if _component(service["metadata"]["labels"]) == "backend":  # over pods outside the release
            continue
        chosen = [
            t for t in templates if selects({"matchLabels": service["spec"]["selector"]}, t["metadata"]["labels"])
        ]
        assert len(chosen) == 1, f"{values}: Service {service['metadata']['name']} selects {len(chosen)} workloads"
        names = {p["name"] for c in chosen[0]["spec"]["containers"] for p in c["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= names
    for pdb in find(docs, "PodDisruptionBudget"):
        chosen = [t for t in templates if selects(pdb["spec"]["selector"], t["metadata"]["labels"])]
        assert len(chosen) == 1, f"{values}: PodDisruptionBudget {pdb['metadata']['name']} selects {len(chosen)}"
        assert _component(pdb["metadata"]["labels"]) == _component(chosen[0]["metadata"]["labels"])


def _fewest_replicas(docs: list[dict], workload: dict) -> int:
    """The replicas a workload may run with: its own count, or its autoscaler's minimum."""
    name = workload["metadata"]["name"]
    scalers = [h for h in find(docs, "HorizontalPodAutoscaler") if h["spec"]["scaleTargetRef"]["name"] == name]
    return scalers[0]["spec"]["minReplicas"] if scalers else workload["spec"].get("replicas", 1)


def _evictable(budget: dict, replicas: int) -> int:
    """Pods a PodDisruptionBudget lets a drain evict from `replicas` healthy ones (percentages rounded up)."""
    spec = budget["spec"]

    def scaled(value: int | str) -> int:
        return math.ceil(int(value[:-1]) * replicas / 100) if isinstance(value, str) else value

    if "minAvailable" in spec:
        return replicas - scaled(spec["minAvailable"])
    return scaled(spec["maxUnavailable"])


@pytest.mark.parametrize("values", VALID)
def test_no_budget_blocks_a_node_drain(values: str):
    """A budget that lets no pod go (maxUnavailable 0, minAvailable at the replica count) makes every node drain
    wait for good; an unhealthy pod (crash looping) may always go, so it never holds a drain up either."""
    docs = render(values)
    for pdb in find(docs, "PodDisruptionBudget"):
        (workload,) = [w for w, t in pod_templates(docs) if selects(pdb["spec"]["selector"], t["metadata"]["labels"])]
        assert _evictable(pdb, _fewest_replicas(docs, workload)) >= 1, f"{values}: {pdb['metadata']['name']}"
        assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


@pytest.mark.parametrize("values", VALID)
def test_gateway_reaches_bundled_workers_through_their_headless_service(values: str):
    docs = render(values)
    config = yaml.safe_load(gateway_config(docs))
    services = {s["metadata"]["name"]: s for s in find(docs, "Service")}
    workers = [d for d in find(docs, "Deployment") if _component(d["metadata"]["labels"]) == "worker"]
    dns_hosts = [m["backend"]["dns"] for m in config["models"] if m["backend"].get("incremental")]
    assert len(dns_hosts) == len(workers)
    for dns in dns_hosts:
        name, namespace = dns["host"].split(".")[:2]
        assert namespace == "llm" and dns["host"].endswith(".svc.cluster.local")
        service = services[name]
        assert service["spec"]["clusterIP"] == "None", "the gateway needs every pod address, not a virtual IP"
        assert service["spec"]["ports"][0]["port"] == dns["port"]


@pytest.mark.parametrize("values", VALID)
def test_the_gateway_dials_the_pods_port_behind_a_headless_service_it_makes(values: str):
    """A headless Service maps no port: its name resolves to pod addresses, which listen on the targetPort."""
    docs = render(values)
    made = {s["metadata"]["name"]: s for s in find(docs, "Service") if s["spec"].get("clusterIP") == "None"}
    for model in yaml.safe_load(gateway_config(docs))["models"]:
        dns = model["backend"].get("dns")
        service = made.get(dns["host"].split(".")[0]) if dns else None
        if service is not None:
            target = service["spec"]["ports"][0]["targetPort"]
            pods = [
                t
                for _, t in pod_templates(docs)
                if selects({"matchLabels": service["spec"]["selector"]}, t["metadata"]["labels"])
            ]
            if pods:  # named targetPort of a bundled worker: its container's port number
                target = next(
                    p["containerPort"] for p in pods[0]["spec"]["containers"][0]["ports"] if p["name"] == target
                )
            assert dns["port"] == target, f"{values}: {model['id']} dials {dns['port']}, its pods listen on {target}"


def _connects_to(url: str) -> int:
    """The port the OTLP exporter posts to: the URL's own, else its scheme's (the SDK adds no 4318)."""
    parts = urlsplit(url)
    return parts.port or {"http": 80, "https": 443}[parts.scheme]


@pytest.mark.parametrize("endpoint", ["https://otel.example.com", "http://otel-collector.observability"])
def test_the_collector_is_reachable_on_its_schemes_port_when_its_url_names_none(endpoint: str):
    docs = render("networkpolicy-on.yaml", f"gateway.tracing.endpoint={endpoint}")
    egress = one(docs, "NetworkPolicy", "gw-llm-gateway")["spec"]["egress"]
    peers = [rule for rule in egress if rule.get("to") and "observability" in str(rule["to"])]
    assert [[p["port"] for p in rule["ports"]] for rule in peers] == [[_connects_to(endpoint)]]


@pytest.mark.parametrize(
    ("url", "port"), [("rediss://:pw@redis.example:6380/1", 6380), ("redis://redis.example/0", 6379)]
)
def test_the_gateway_reaches_an_external_redis_on_the_port_of_its_url(url: str, port: int):
    egress = one(render("redis-external.yaml", f"redis.url={url}"), "NetworkPolicy", "gw-llm-gateway")["spec"]["egress"]
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "data"}}}]  # redis-external.yaml
    redis = [r for r in egress if r.get("to") == peers]
    assert [[p["port"] for p in rule["ports"]] for rule in redis] == [[port]]


@pytest.mark.parametrize("values", WITH_NETWORK_POLICY + [v for v in VALID if _isolated_by_default(v)])
def test_network_policies_select_the_pods_they_mean(values: str):
    docs = render(values)
    templates = {_component(t["metadata"]["labels"]): [] for _, t in pod_templates(docs)}
    for _, t in pod_templates(docs):
        templates[_component(t["metadata"]["labels"])].append(t)
    policies = find(docs, "NetworkPolicy")
    gateway_labels = templates["gateway"][0]["metadata"]["labels"]

    def selected(selector: dict) -> set[str]:
        return {c for c, ts in templates.items() for t in ts if selects(selector, t["metadata"]["labels"])}

    for component, ts in templates.items():  # every pod is covered by exactly one policy, made for it
        covering = [p for p in policies if any(selects(p["spec"]["podSelector"], t["metadata"]["labels"]) for t in ts)]
        if component == "gateway" and values not in WITH_NETWORK_POLICY:
            assert covering == [], f"{values}: the gateway is under a policy it was not given"
            continue
        assert len(covering) == 1, f"{values}: {component} pods are under {len(covering)} policies"
        assert selected(covering[0]["spec"]["podSelector"]) == {component}
        assert set(covering[0]["spec"]["policyTypes"]) == {"Ingress", "Egress"}

    for policy in policies:
        component = _component(policy["metadata"]["labels"])
        if component == "gateway":
            continue
        # workers and Redis: ingress from the gateway pods only (and Prometheus peers), no egress at all
        assert policy["spec"]["egress"] == []
        sources = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]
        pod_peers = [p for p in sources if "podSelector" in p and "namespaceSelector" not in p]
        assert pod_peers and all(selected(p["podSelector"]) == {"gateway"} for p in pod_peers)
        own_ports = {
            p["containerPort"] for t in templates[component] for c in t["spec"]["containers"] for p in c["ports"]
        }
        assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == own_ports

    if values not in WITH_NETWORK_POLICY:
        return
    gateway_policy = next(p for p in policies if _component(p["metadata"]["labels"]) == "gateway")
    assert selects(gateway_policy["spec"]["podSelector"], gateway_labels)
    egress = gateway_policy["spec"]["egress"]
    assert any({p["port"] for p in rule["ports"]} == {53} and rule.get("to") for rule in egress), "DNS"
    for component in ("worker", "redis"):
        if component in templates:
            rules = [
                r
                for r in egress
                for peer in r.get("to", [])
                if selected(peer.get("podSelector", {"x": 1})) >= {component}
            ]
            assert rules, f"{values}: the gateway cannot reach its {component} pods"
            ports = {
                p["containerPort"] for t in templates[component] for c in t["spec"]["containers"] for p in c["ports"]
            }
            assert ports <= {p["port"] for r in rules for p in r["ports"]}
    for service in find(docs, "Service"):  # headless Services the chart makes over external backend pods
        if _component(service["metadata"]["labels"]) == "backend":
            selector = {"matchLabels": service["spec"]["selector"]}
            port = service["spec"]["ports"][0]["targetPort"]
            assert any(
                peer.get("podSelector") == selector and [p["port"] for p in rule["ports"]] == [port]
                for rule in egress
                for peer in rule.get("to", [])
            ), f"{values}: the gateway cannot reach the pods behind {service['metadata']['name']}"
    env = {e["name"]: e.get("value") for e in gateway_container(docs)["env"]}
    if "OTEL_EXPORTER_OTLP_ENDPOINT" in env:
        assert _connects_to(env["OTEL_EXPORTER_OTLP_ENDPOINT"]) in {p["port"] for rule in egress for p in rule["ports"]}
    assert not any(rule == {} for rule in egress), "an empty egress rule would allow everything"


def test_extra_env_replaces_the_charts_variable_of_the_same_name():
    extra = [{"name": "OTEL_SERVICE_NAME", "value": "edge"}, {"name": "HOME", "value": "/tmp/home"}]
    values = {"gateway": {"extraEnv": extra}, "worker": {"extraEnv": extra[1:]}}
    for _, template in pod_templates(render("networkpolicy-on.yaml", extra=yaml.safe_dump(values))):
        env = template["spec"]["containers"][0]["env"]
        names = [e["name"] for e in env]
        assert names.count("HOME") == 1 and {e["name"]: e.get("value") for e in env}["HOME"] == "/tmp/home"
        if _component(template["metadata"]["labels"]) == "gateway":
            assert names.count("OTEL_SERVICE_NAME") == 1 and env[-2:] == extra


def test_tracing_values_become_the_opentelemetry_variables_only_with_an_endpoint():
    env = {e["name"]: e.get("value") for e in gateway_container(render("networkpolicy-on.yaml"))["env"]}
    assert {k: v for k, v in env.items() if k.startswith("OTEL_")} == {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4318",
        "OTEL_SERVICE_NAME": "llm-gateway-prod",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.1",
    }
    untraced = gateway_container(render(None, "gateway.tracing.serviceName=x"))["env"]
    assert not [e for e in untraced if e["name"].startswith("OTEL_")]


@pytest.mark.parametrize("values", VALID)
def test_workers_and_redis_accept_only_the_gateway_by_default(values: str):
    """Safe by default: the bundled workers (unauthenticated model servers) and the in-chart Redis are under a
    policy unless turned off, which cannot cut the gateway's own traffic (its pods are under none unless
    networkPolicy.enabled); a ServiceMonitor's scrapes from an unnamed Prometheus are not cut either."""
    config = yaml.safe_load((VALUES / values).read_text()) or {}
    np = config.get("networkPolicy", {})
    unnamed_scraper = config.get("serviceMonitor", {}).get("enabled") and not np.get("prometheus")
    docs = render(values)
    policies = find(docs, "NetworkPolicy")
    for _, template in pod_templates(docs):
        component = _component(template["metadata"]["labels"])
        covering = [p for p in policies if selects(p["spec"]["podSelector"], template["metadata"]["labels"])]
        if np.get("enabled"):
            expected = 1
        elif component == "gateway" or not np.get("isolateWorkersAndRedis", True):
            expected = 0
        else:
            expected = 0 if component == "worker" and unnamed_scraper else 1
        assert len(covering) == expected, f"{values}: {component} pods are under {len(covering)} policies"


def test_a_service_monitor_without_prometheus_peers_leaves_the_workers_open_and_says_so():
    sets = ("serviceMonitor.enabled=true",)
    docs = render("gpu-worker.yaml", *sets)
    assert [p["metadata"]["name"] for p in find(docs, "NetworkPolicy")] == ["gw-llm-gateway-redis"]
    done = helm(
        "install", "llm", str(CHART), "--dry-run=client", "-f", str(VALUES / "gpu-worker.yaml"), "--set", sets[0]
    )
    assert "WARNING: the bundled workers are not isolated" in done.stdout
    peers = "networkPolicy.prometheus[0].namespaceSelector.matchLabels.name=monitoring"
    assert [p["metadata"]["name"] for p in find(render("gpu-worker.yaml", *sets, peers), "NetworkPolicy")] == [
        "gw-llm-gateway-redis",
        "gw-llm-gateway-worker",
    ]


def _pod_template(docs: list[dict]) -> dict:
    return gateway_deployment(docs)["spec"]["template"]


def _policies_object(docs: list[dict]) -> dict:
    return next(d for d in docs if d["metadata"]["name"].endswith("-policies"))


@pytest.mark.parametrize("values", ["cpu-demo.yaml", "config-secret.yaml"])
def test_config_changes_roll_the_pods_policy_changes_do_not(values: str):
    base = render(values)
    models = yaml.safe_load((VALUES / values).read_text()).get("models") or [
        {"id": "smollm2-135m-instruct", "family": "hermes", "backend": {"type": "embedded"}}
    ]
    changed = yaml.safe_dump({"models": [{**models[0], "defaultMaxTokens": 128}] + models[1:]})
    config_changed = render(values, extra=changed)
    assert gateway_config(config_changed) != gateway_config(base)
    assert (
        _pod_template(config_changed)["metadata"]["annotations"]["checksum/config"]
        != _pod_template(base)["metadata"]["annotations"]["checksum/config"]
    )

    tenants = yaml.safe_load((VALUES / values).read_text())["policies"]["tenants"]
    tenant_name, tenant = next(iter(tenants.items()))
    new_key = {"id": "rotated", "sha256": "ab" * 32}
    edited = {
        **tenant,
        "keys": tenant["keys"] + [new_key],
        "limits": {"requests_per_minute": 5, "queue_timeout_s": 300},
    }
    policies_changed = render(values, extra=yaml.safe_dump({"policies": {"tenants": {tenant_name: edited}}}))
    assert _policies_object(policies_changed) != _policies_object(base), "the policy edit must reach the cluster"
    assert _pod_template(policies_changed) == _pod_template(base), "a policy edit must not restart pods"


def test_an_extra_values_document_leaves_no_file_behind():
    before = set(Path(tempfile.gettempdir()).glob(f"{EXTRA_PREFIX}*"))
    assert gateway_config(render("defaults.yaml", extra="replicaCount: 3\n"))
    assert set(Path(tempfile.gettempdir()).glob(f"{EXTRA_PREFIX}*")) == before


def test_redis_url_changes_roll_the_pods():
    key = "secretChecksumKey=a-key-kept-with-the-secret-values"
    base = _pod_template(render("redis-external.yaml", key))["metadata"]["annotations"]
    again = _pod_template(render_again("redis-external.yaml", key))["metadata"]["annotations"]
    moved = _pod_template(render("redis-external.yaml", key, "redis.url=redis://redis-2.data:6379/0"))["metadata"]
    assert again == base, "an unchanged Secret must not roll the pods"
    assert moved["annotations"]["checksum/redis-url"] != base["checksum/redis-url"]
    assert moved["annotations"]["checksum/config"] == base["checksum/config"]


def test_the_checksum_key_secret_exists_exactly_when_a_drawn_key_is_used():
    key_secret = f"{RELEASE}-llm-gateway-checksum-key"
    assert find(render("redis-inchart.yaml"), "Secret", key_secret), "the drawn key must be kept for the next upgrade"
    assert not find(render("redis-inchart.yaml", "secretChecksumKey=given"), "Secret", key_secret)
    assert not find(render("cpu-demo.yaml"), "Secret", key_secret), "no Secret hashed, no key"


@pytest.mark.parametrize("key", ["", "a-key-kept-with-the-secret-values"])
def test_a_checksum_does_not_confirm_a_guess_of_the_secret(key: str):
    """Whoever reads pod specs knows the chart and may guess the values: rendering them with the right password must
    not give the same annotation (a plain sha256 of the Secret would, so a weak password falls to a dictionary)."""
    sets = ("redis.url=redis://:hunter2@redis-master.data:6379/2", "gateway.configAsSecret=true")
    seen = _pod_template(render("redis-external.yaml", *sets, f"secretChecksumKey={key}"))["metadata"]["annotations"]
    guess = render_again("redis-external.yaml", *sets)  # the right values, not the key (given, or drawn in the render)
    guessed = _pod_template(guess)["metadata"]["annotations"]
    for annotation in ("checksum/redis-url", "checksum/config"):
        assert seen[annotation] != guessed[annotation], annotation


@pytest.mark.parametrize("values", [v for v in VALID if _enabled(v, "policies")])
def test_policies_are_a_directory_mount_the_gateway_watches(values: str):
    docs = render(values)
    container = gateway_container(docs)
    mount = next(m for m in container["volumeMounts"] if m["name"] == "policies")
    assert "subPath" not in mount, "files mounted with subPath never see updates"
    assert mount["mountPath"] == _arg(container, "--policies")
    assert not any("polic" in k for k in _pod_template(docs)["metadata"].get("annotations", {}))


def test_no_raw_key_reaches_a_manifest():
    """Key entries carry only id, sha256 (a SHA-256) and expires in every render; the templates refuse anything
    else even with the schema skipped, without echoing the key."""
    for values in VALID:
        text = render_text(values)
        assert not re.search(r"\bsk-[A-Za-z0-9_-]{8,}", text)
        for doc in render(values):
            if doc["metadata"]["name"].endswith("-policies"):
                for body in (doc.get("data") or doc.get("stringData")).values():
                    for key in (yaml.safe_load(body) or {}).get("keys", []):
                        assert set(key) <= {"id", "sha256", "expires"} and re.fullmatch(
                            "[0-9a-fA-F]{64}", key["sha256"]
                        )
    raw = "sk-live-0123456789abcdefghijklmnopqrstuv"
    for name in ("raw-key.yaml", "raw-key-as-hash.yaml"):
        done = helm(
            "template", "r", str(CHART), "--skip-schema-validation", "-f", str(VALUES / "invalid" / name), check=False
        )
        assert done.returncode != 0 and "policies.tenants.acme.keys[0]" in done.stderr
        assert raw not in done.stdout + done.stderr


@pytest.mark.parametrize("values", VALID)
def test_names_fit_63_characters_with_the_longest_release_name(values: str):
    """Names and labels the API server takes, each object once (a second of one kind and name fails the install)."""
    made = [(doc["kind"], doc["metadata"]["name"]) for doc in render(values, release=LONG_RELEASE)]
    assert len(made) == len(set(made)), f"{values}: {sorted(m for m in made if made.count(m) > 1)}"
    for doc in render(values, release=LONG_RELEASE):
        name = doc["metadata"]["name"]
        assert len(name) <= 63 and DNS_LABEL.match(name), f"{values}: {doc['kind']} {name!r}"
        labels = dict(doc["metadata"].get("labels", {}))
        for _, template in pod_templates([doc]):
            labels |= template["metadata"]["labels"]
        for key, value in labels.items():  # the API server refuses any other
            assert LABEL_KEY.match(key) and LABEL_VALUE.match(value), f"{values}: {doc['kind']} {name}: {key}={value}"
    config = yaml.safe_load(gateway_config(render(values, release=LONG_RELEASE)))
    for model in config["models"]:
        if "dns" in model["backend"]:
            assert len(model["backend"]["dns"]["host"].split(".")[0]) <= 63


def test_workers_of_ids_alike_serve_their_own_model():
    """Two ids with one slug (alike in their first 22 characters), told apart by nameSuffix: each worker Service
    selects its own Deployment's pods alone, or requests for one model would be answered by the other."""
    models = [
        {"id": "deepseek-v4.1-instruct-fp8", "backend": {"type": "worker"}, "worker": {"gpus": 0}},
        {
            "id": "deepseek-v4.1-instruct-bf16",
            "backend": {"type": "worker"},
            "worker": {"gpus": 0, "nameSuffix": "ds-bf16"},
        },
    ]
    docs = render(None, extra=yaml.safe_dump({"models": models}))
    workers = {
        d["metadata"]["name"]: d for d in find(docs, "Deployment") if _component(d["metadata"]["labels"]) == "worker"
    }
    assert len(workers) == 2
    for model in yaml.safe_load(gateway_config(docs))["models"]:
        service = one(docs, "Service", model["backend"]["dns"]["host"].split(".")[0])
        chosen = [
            n
            for n, d in workers.items()
            if selects({"matchLabels": service["spec"]["selector"]}, d["spec"]["template"]["metadata"]["labels"])
        ]
        assert chosen == [service["metadata"]["name"]], f"{model['id']}: its Service selects the pods of {chosen}"


def test_bundled_gpu_worker():
    docs = render("gpu-worker.yaml")
    worker = one(docs, "Deployment", "gw-llm-gateway-llama-3-2-1b-instruct")
    spec = worker["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert worker["spec"]["replicas"] == 2
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert _arg(container, "--device") == "cuda" and _arg(container, "--model") == "/models/llama-3.2-1b-instruct"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"] == {"claimName": "models-ro", "readOnly": True}
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"


def _worker_tmp(docs: list[dict]) -> dict[str, dict]:
    """Each bundled worker's /tmp emptyDir, by Deployment name."""
    return {
        workload["metadata"]["name"]: next(v["emptyDir"] for v in pods["spec"]["volumes"] if v["name"] == "tmp")
        for workload, pods in pod_templates(docs)
        if workload["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    }


def test_a_workers_tmp_is_sized_for_the_float32_copy_of_its_weights():
    """/tmp holds the conversion cache, where a GGUF's weights are written as float32 (4 bytes a parameter): sized
    from the parameter count, else the memory limit (the worker holds that copy in memory), plus 2Gi; or as given."""
    gib = 2**30
    sized = _worker_tmp(render("scheduling-and-secrets.yaml"))
    by_count = quantity_bytes(sized["gw-llm-gateway-mistral-7b-instruct-v0"]["sizeLimit"])
    assert 4 * 7.25e9 + 2 * gib <= by_count < 4 * 7.25e9 + 2 * gib + 2**20
    assert sized["gw-llm-gateway-mistral-b"] == {"medium": "Memory", "sizeLimit": "30Gi"}
    by_memory = _worker_tmp(render("gpu-worker.yaml"))["gw-llm-gateway-llama-3-2-1b-instruct"]
    assert by_memory == {"sizeLimit": f"{50 * 1024}Mi"}  # its memory limit, 48Gi, and 2Gi
    in_bytes = render("gpu-worker.yaml", extra="worker: {tmp: {sizeLimit: 3000000000}}")  # a float64 in helm
    assert _worker_tmp(in_bytes)["gw-llm-gateway-llama-3-2-1b-instruct"] == {"sizeLimit": 3000000000}  # not 3e+09


@pytest.mark.parametrize("values", VALID)
def test_no_workers_tmp_is_unbounded(values: str):
    for name, tmp in _worker_tmp(render(values)).items():
        assert quantity_bytes(tmp["sizeLimit"]) >= 2**30, f"{name}: an unbounded /tmp can fill the node's disk"


def _gateway_tmp(docs: list[dict]) -> dict:
    return next(
        v["emptyDir"] for v in gateway_deployment(docs)["spec"]["template"]["spec"]["volumes"] if v["name"] == "tmp"
    )


def test_the_gateway_pods_tmp_is_bounded_and_fits_the_embedded_models_float32_copy():
    """The embedded model's worker writes its weights as float32 into /tmp (4 bytes a parameter: 135M of them), and
    an audit file may live there: the default bounds /tmp with room for both; a given size and medium are kept, and
    null lifts the bound."""
    parameters = float(re.search(r"-(\d+)m-", EMBEDDED_MODEL_ID).group(1)) * 1e6
    default = _gateway_tmp(render("cpu-demo.yaml"))  # the embedded model
    assert set(default) == {"sizeLimit"} and quantity_bytes(default["sizeLimit"]) >= 4 * parameters + 2**30
    assert _gateway_tmp(render("config-secret.yaml")) == {"medium": "Memory", "sizeLimit": "4Gi"}
    assert _gateway_tmp(render("defaults.yaml", "gateway.tmp.sizeLimit=null")) == {}
    in_bytes = render("defaults.yaml", extra="gateway: {tmp: {sizeLimit: 3000000000}}")  # a float64 in helm
    assert _gateway_tmp(in_bytes) == {"sizeLimit": 3000000000}


def test_the_proxy_header_values_become_the_gateways_flags():
    assert "--no-proxy-headers" in gateway_container(render("networkpolicy-on.yaml"))["args"]
    args = gateway_container(render("config-secret.yaml"))["args"]
    assert args[args.index("--forwarded-allow-ips") + 1] == "10.0.0.0/8, fd00::/8"
    assert not {"--forwarded-allow-ips", "--no-proxy-headers"} & set(gateway_container(render("defaults.yaml"))["args"])


def test_a_node_drain_never_evicts_every_replica_of_a_bundled_worker():
    name = "gw-llm-gateway-llama-3-2-1b-instruct"  # two replicas
    assert one(render("gpu-worker.yaml"), "PodDisruptionBudget", name)["spec"]["maxUnavailable"] == 1
    single = render("networkpolicy-off.yaml")  # one replica: no budget (it would be a no-op)
    assert [p["metadata"]["name"] for p in find(single, "PodDisruptionBudget")] == ["gw-llm-gateway"]


def test_a_gpu_workers_rollout_needs_no_spare_gpu():
    """On a GPU pool with every GPU taken (shared GPUs), a surge pod waits Pending and the rollout never moves."""
    name = "gw-llm-gateway-llama-3-2-1b-instruct"
    strategy = one(render("gpu-worker.yaml"), "Deployment", name)["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    cpu_worker = one(render("networkpolicy-off.yaml"), "Deployment", "gw-llm-gateway-smollm2-135m-instruct")
    assert "strategy" not in cpu_worker["spec"]  # Kubernetes' default: a CPU worker may surge
    recreate = render("gpu-worker.yaml", extra=yaml.safe_dump({"worker": {"updateStrategy": {"type": "Recreate"}}}))
    assert one(recreate, "Deployment", name)["spec"]["strategy"] == {"type": "Recreate"}


def test_autoscaling_owns_the_replica_count():
    docs = render("redis-inchart.yaml")
    assert "replicas" not in gateway_deployment(docs)["spec"]
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == gateway_deployment(docs)["metadata"]["name"]
    assert {m["type"] for m in hpa["spec"]["metrics"]} == {"Resource", "Pods"}
    assert (
        one(docs, "StatefulSet")["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "2Gi"
    )


def test_gateway_workers_become_the_flag_and_need_redis_with_policies():
    assert "--workers" not in gateway_container(render("defaults.yaml"))["args"]
    assert _arg(gateway_container(render("redis-external.yaml", "gateway.workers=3")), "--workers") == "3"
    refused = helm(
        "template", RELEASE, str(CHART), "-f", str(VALUES / "cpu-demo.yaml"), "--set", "gateway.workers=2", check=False
    )
    assert refused.returncode != 0 and "needs Redis" in refused.stderr


GATEWAY_API_DURATION = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")
"""GEP-2257, as the HTTPRoute CRD checks it."""

LONG_DEADLINES = {
    "httpRoute": {"enabled": True},
    "models": [
        {"id": "quick", "backend": {"type": "sglang", "url": "http://a:1", "settings": {"request_timeout_s": 120}}},
        {"id": "slow", "backend": {"type": "vllm", "url": "http://b:2", "settings": {"request_timeout_s": 1800.5}}},
        {"id": "default", "backend": {"type": "embedded"}},
    ],
    "policies": {
        "enabled": True,
        "defaults": {"limits": {"queue_timeout_s": 45}},
        "tenants": {
            "a": {"tenant": "a", "keys": [{"id": "k", "sha256": "ab" * 32}], "limits": {"queue_timeout_s": 240}}
        },
    },
}
"""Models whose deadlines differ, tenants who may wait in a fair queue: the route must outlast them all."""


def _seconds(duration: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(int(n) * units[u] for n, u in re.findall(r"([0-9]+)(ms|h|m|s)", duration))


def _route_timeouts(docs: list[dict]) -> dict:
    (rule,) = one(docs, "HTTPRoute")["spec"]["rules"]
    timeouts = rule["timeouts"]
    assert all(GATEWAY_API_DURATION.match(t) for t in timeouts.values()), timeouts
    if _seconds(timeouts["request"]):  # the CRD's rule: one try never outlasts the whole request
        assert _seconds(timeouts["backendRequest"]) <= _seconds(timeouts["request"])
    return timeouts


@pytest.mark.parametrize("extra", [LONG_DEADLINES, {"httpRoute": {"enabled": True}}], ids=["long", "defaults"])
def test_the_route_never_cuts_a_request_the_gateway_still_serves(extra: dict):
    """Some Gateway API implementations cut a response at about 15 s unless the route says otherwise: by default the
    route outlasts the longest a request may take in the gateway (its deadline, its wait in a fair queue), so the
    gateway's own deadline answers first."""
    docs = render(None, extra=yaml.safe_dump(extra))
    timeouts = _route_timeouts(docs)
    assert _seconds(timeouts["request"]) >= _longest_request_s(docs)
    assert timeouts["backendRequest"] == timeouts["request"]
    # a pod replaced meanwhile lets such a request finish too, tenants' own queue waits aside (a policy edit must
    # not roll the pods)
    assert float(_arg(gateway_container(docs), "--drain-timeout")) == math.ceil(
        _longest_request_s(docs, policy_queues=False)
    )


def test_route_timeouts_are_overridable():
    docs = render("httproute.yaml", "httpRoute.requestTimeout=20m", "httpRoute.backendRequestTimeout=5m")
    assert _route_timeouts(docs) == {"request": "20m", "backendRequest": "5m"}
    assert _route_timeouts(render("httproute.yaml", "httpRoute.requestTimeout=0s")) == {
        "request": "0s",  # none (Gateway API: an implementation that cannot, takes its longest)
        "backendRequest": "0s",
    }
    (rule,) = one(render("httproute.yaml", "httpRoute.setTimeouts=false"), "HTTPRoute")["spec"]["rules"]
    assert "timeouts" not in rule
