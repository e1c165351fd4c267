"""Renders the chart with the real helm binary (once per values file and release per session) and reads the result."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "llm-gateway"
VALUES = Path(__file__).resolve().parent / "values"
VALID = sorted(p.name for p in VALUES.glob("*.yaml"))
INVALID = sorted(p.name for p in (VALUES / "invalid").glob("*.yaml"))
NAMESPACE = "llm"
RELEASE = "gw"
LONG_RELEASE = "a-release-name-as-long-as-helm-allows-fifty-three-chr"  # helm's limit is 53 characters
assert len(LONG_RELEASE) == 53

TOOLS = Path(os.environ.get("LLM_GATEWAY_K8S_TOOLS", Path.home() / ".cache" / "llm-gateway" / "k8s-tools"))
HELM = TOOLS / "helm" / "helm"
KUBECTL = TOOLS / "kubectl" / "kubectl"
CRD_MODELS = TOOLS / "crd-models" / "node_modules"
EXTRA_PREFIX = "helm-test-extra-"
MISSING_TOOLS = f"missing under {TOOLS}: run scripts/setup.sh --test (it runs scripts/setup_k8s_tools.sh)"


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real helm; fails the test clearly when the binary is not installed."""
    if not HELM.is_file():
        raise AssertionError(f"helm {MISSING_TOOLS}")
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/helm-cache", "HELM_CONFIG_HOME": "/tmp/helm-config"}
    done = subprocess.run([str(HELM), *args], check=False, capture_output=True, text=True, timeout=120, env=env)
    if check and done.returncode:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{done.stderr}")
    return done


@functools.cache
def render_text(values: str | None = None, *sets: str, release: str = RELEASE, extra: str = "") -> str:
    """`helm template` of the chart with tests/helm/values/<values>, `--set` pairs and an extra values document."""
    args = ["template", release, str(CHART), "--namespace", NAMESPACE]
    if values:
        args += ["-f", str(VALUES / values)]
    for pair in sets:
        args += ["--set", pair]  # --set wins over every -f, wherever it stands
    if not extra:
        return helm(*args).stdout
    with tempfile.NamedTemporaryFile("w", prefix=EXTRA_PREFIX, suffix=".yaml") as document:
        document.write(extra)
        document.flush()
        return helm(*args, "-f", document.name).stdout


def documents(text: str) -> list[dict]:
    """The manifests of a rendered text as dicts."""
    return [doc for doc in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if doc]


def render(values: str | None = None, *sets: str, release: str = RELEASE, extra: str = "") -> list[dict]:
    """The rendered manifests as dicts (a fresh copy each call)."""
    return documents(render_text(values, *sets, release=release, extra=extra))


def render_again(values: str | None = None, *sets: str, release: str = RELEASE, extra: str = "") -> list[dict]:
    """A second, uncached rendering (what drawn values, e.g. generated keys, give another time)."""
    return documents(render_text.__wrapped__(values, *sets, release=release, extra=extra))


def find(docs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job")


def pod_templates(docs: list[dict]) -> Iterator[tuple[dict, dict]]:
    """(workload, pod template) of every workload."""
    for doc in docs:
        if doc["kind"] in WORKLOADS:
            yield doc, doc["spec"]["template"]


def gateway_deployment(docs: list[dict]) -> dict:
    return next(
        d for d in find(docs, "Deployment") if d["metadata"]["labels"]["app.kubernetes.io/component"] == "gateway"
    )


def gateway_container(docs: list[dict]) -> dict:
    return gateway_deployment(docs)["spec"]["template"]["spec"]["containers"][0]


def gateway_config(docs: list[dict]) -> str:
    """The gateway.yaml the chart renders (ConfigMap data or Secret stringData)."""
    for doc in docs:
        if doc["kind"] in ("ConfigMap", "Secret") and doc["metadata"]["name"].endswith("-config"):
            return (doc.get("data") or doc.get("stringData"))["gateway.yaml"]
    raise AssertionError("no gateway config rendered")


def selects(selector: dict, labels: dict) -> bool:
    """Whether a LabelSelector (matchLabels and matchExpressions) selects these labels."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        value, op = labels.get(expr["key"]), expr["operator"]
        if op == "In" and value not in expr["values"]:
            return False
        if op == "NotIn" and value in expr["values"]:
            return False
        if op == "Exists" and value is None:
            return False
        if op == "DoesNotExist" and value is not None:
            return False
    return True


_QUANTITY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity_bytes(quantity: str) -> float:
    """A Kubernetes memory quantity (256Mi, 1G, 268435456) in bytes."""
    number, unit = re.fullmatch(r"([\d.]+)([A-Za-z]*)", str(quantity)).groups()
    return float(number) * _QUANTITY.get(unit, 1)
