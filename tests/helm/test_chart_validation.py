"""The chart through the real helm: `helm lint --strict` and `helm template` over the values matrix, refusals of bad
values, and every rendered manifest validated against Kubernetes 1.35's schemas (CRDs against their own)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.helm.chart import CHART, CRD_MODELS, INVALID, KUBECTL, MISSING_TOOLS, VALID, VALUES, helm, render

try:
    import kubernetes_validate
except ImportError as exc:  # a test dependency: say how to get it
    raise ImportError("kubernetes-validate is missing: run scripts/setup.sh --test") from exc

KUBERNETES = "1.35.0"
CRD_KINDS = {"ServiceMonitor": "monitoring.coreos.com/v1", "HTTPRoute": "gateway.networking.k8s.io/v1"}
VALIDATOR = Path(__file__).resolve().parent / "validate_crds.mjs"


def test_the_real_tools_are_the_pinned_versions():
    assert "v4.1.4" in helm("version", "--short").stdout
    assert KUBECTL.is_file(), f"kubectl {MISSING_TOOLS}"
    client = subprocess.run([str(KUBECTL), "version", "--client"], capture_output=True, text=True, check=True)
    assert "v1.35.2" in client.stdout


@pytest.mark.parametrize("values", VALID)
def test_lint_strict(values: str):
    done = helm("lint", "--strict", str(CHART), "-f", str(VALUES / values), "--namespace", "llm")
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("values", INVALID)
def test_schema_and_templates_refuse_bad_values(values: str):
    """Each file under values/invalid/ starts with `# expect: <part of the error>`. Schema errors fail `helm lint`
    too; a template's `fail` (checks a schema cannot express) fails rendering, which lint only reports as INFO."""
    path = VALUES / "invalid" / values
    expected = path.read_text().splitlines()[0].removeprefix("# expect:").strip()
    assert expected, f"{values}: first line must be '# expect: ...'"
    schema_error = expected.startswith("at '") or "additional properties" in expected
    commands = [["template", "r", str(CHART)]] + ([["lint", "--strict", str(CHART)]] if schema_error else [])
    for command in commands:
        done = helm(*command, "-f", str(path), check=False)
        assert done.returncode != 0, f"helm {command[0]} accepted {values}"
        assert expected in done.stdout + done.stderr, f"{values}: {done.stdout}{done.stderr}"


CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())
OLDEST = re.fullmatch(r">=(\d+\.\d+\.\d+)-0", CHART_META["kubeVersion"]).group(1)
"""The oldest Kubernetes the chart claims (Chart.yaml kubeVersion): every manifest must be valid there too."""


@pytest.mark.parametrize("values", VALID)
def test_manifests_valid_for_kubernetes_1_35_and_the_oldest_supported(values: str):
    docs = render(values)
    assert docs
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue  # validated against their CRDs below
        for version in (KUBERNETES, OLDEST):
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = f"{values}: {doc['kind']} {doc['metadata']['name']} (Kubernetes {version})"
                pytest.fail(f"{where}: {exc.message} at {list(exc.path)}")


def test_the_chart_deploys_the_images_of_this_version():
    """image.tag and worker.image.tag default to appVersion: it must be the version the images are built from."""
    project = tomllib.loads((CHART.parents[1] / "pyproject.toml").read_text())["project"]["version"]
    assert CHART_META["appVersion"] == project


def test_custom_resources_valid_against_their_crds():
    """ServiceMonitor (Prometheus Operator) and HTTPRoute (Gateway API v1), from every values file that makes them."""
    if not (CRD_MODELS / "@kubernetes-models").is_dir():
        pytest.fail(f"CRD schema models {MISSING_TOOLS}")
    node = shutil.which("node")
    assert node, "node is needed to run the CRD validators (scripts/setup.sh --test needs npm, hence node)"
    docs = [doc for values in VALID for doc in render(values) if doc["kind"] in CRD_KINDS]
    assert {doc["kind"] for doc in docs} == set(CRD_KINDS)
    assert all(doc["apiVersion"] == CRD_KINDS[doc["kind"]] for doc in docs)
    monitor = next(doc for doc in docs if doc["kind"] == "ServiceMonitor")
    broken = [{**monitor, "spec": {**monitor["spec"], "endpoints": [{"port": "http", "interval": "often"}]}}]
    done = subprocess.run(
        [node, str(VALIDATOR), str(CRD_MODELS)],
        input=json.dumps(docs + broken),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    *results, refused = json.loads(done.stdout)
    assert [r for r in results if r["error"]] == []
    assert len(results) == len(docs)
    assert "interval" in (refused["error"] or ""), "the validator must refuse what the CRD refuses"


@pytest.mark.parametrize("values", VALID)
def test_install_notes_tell_how_to_make_a_first_request(values: str):
    """`helm install --dry-run=client` (offline) renders NOTES.txt: the endpoint and a first request."""
    done = helm("install", "llm", str(CHART), "--dry-run=client", "--namespace", "llm", "-f", str(VALUES / values))
    notes = done.stdout.split("NOTES:", 1)[1]
    config = yaml.safe_load((VALUES / values).read_text()) or {}
    models = config.get("models") or [{"id": "smollm2-135m-instruct", "backend": {"type": "embedded"}}]
    generative = [m for m in models if m["backend"]["type"] != "none"]  # a tokenize-only model: /tokenize
    first_model, path = (generative[0]["id"], "/v1/chat/completions") if generative else (models[0]["id"], "/tokenize")
    assert f'"model": "{first_model}"' in notes and path in notes
    policies = config.get("policies", {}).get("enabled", False)
    assert ("authorization: Bearer" in notes) == policies
    assert ("WARNING: no tenant policies" in notes) != policies
    backends = ("sglang", "vllm", "worker")  # embedded: slots known; none: no backend
    unqueued = [m for m in config.get("models") or [] if m["backend"]["type"] in backends and "maxRunning" not in m]
    assert ("are not fair-queued" in notes) == (policies and bool(unqueued))
    forwarded = "port-forward svc/llm-llm-gateway 8000:80" in notes
    if config.get("ingress", {}).get("enabled"):  # the first request goes through the Ingress, over TLS
        assert f"curl -s https://llm.example.com{path}" in notes
        assert "port-forward" not in notes
    else:
        assert forwarded and f"curl -s http://127.0.0.1:8000{path}" in notes


def test_install_notes_give_https_only_to_hosts_with_tls():
    hosts = [{"host": h, "paths": [{"path": "/", "pathType": "Prefix"}]} for h in ("a.example.com", "b.example.com")]
    ingress = {"enabled": True, "hosts": hosts, "tls": [{"hosts": ["b.example.com"], "secretName": "b-tls"}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values:
        values.write(yaml.safe_dump({"ingress": ingress}))
        values.flush()
        done = helm("install", "llm", str(CHART), "--dry-run=client", "--namespace", "llm", "-f", values.name)
    notes = done.stdout.split("NOTES:", 1)[1]
    assert "Endpoint: http://a.example.com/v1, https://b.example.com/v1" in notes
    assert "curl -s http://a.example.com/v1/chat/completions" in notes


def test_install_notes_send_the_first_request_to_a_model_that_generates(tmp_path: Path):
    """A tokenize-only model (backend none) answers chat with a 400: the first chat request goes to a model with a
    backend, or, with none, the first request is a /tokenize."""
    tokenize_only = {"id": "tok", "backend": {"type": "none"}}
    for models, request in [
        ([tokenize_only, {"id": "emb", "backend": {"type": "embedded"}}], "/v1/chat/completions -H"),
        ([tokenize_only], "/tokenize -H"),
    ]:
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump({"models": models}))
        notes = helm("install", "llm", str(CHART), "--dry-run=client", "-f", str(path)).stdout.split("NOTES:", 1)[1]
        assert f"8000{request}" in notes and f'"model": "{models[-1]["id"]}"' in notes


def test_the_guide_examples_render(tmp_path: Path):
    """Every values example in docs/kubernetes.md passes the schema and renders."""
    guide = (CHART.parents[1] / "docs" / "kubernetes.md").read_text()
    examples = re.findall(r"```yaml\n(.*?)```", guide, re.DOTALL)
    assert len(examples) >= 2
    for i, example in enumerate(examples):
        path = tmp_path / f"example-{i}.yaml"
        path.write_text(example)
        helm("template", "r", str(CHART), "-f", str(path))


def test_the_defaults_name_the_chart_version_they_come_with():
    """values.yaml's defaultsOfChart is how a render tells its own defaults from a previous chart's: bump it with
    Chart.yaml's version."""
    assert yaml.safe_load((CHART / "values.yaml").read_text())["defaultsOfChart"] == CHART_META["version"]


@pytest.mark.parametrize(
    ("earlier", "named"),
    [("defaultsOfChart=null", "an earlier chart"), ("defaultsOfChart=0.0.9", "chart 0.0.9")],
)
def test_an_upgrade_with_the_previous_charts_defaults_is_refused_with_the_way_out(earlier: str, named: str):
    """`helm upgrade --reuse-values` renders with the previous chart's defaults in place of values.yaml: an old drain
    timeout (30 s) kept, settings added since absent (here as --set null makes them). The render must say so and how
    to upgrade, before any template trips over a missing setting, rather than roll pods with stale defaults."""
    previous = (earlier, "gateway.drain.timeoutSeconds=30", "redis.enabled=true", "redis.auth=null", "worker.tmp=null")
    args = ["template", "r", str(CHART), "-f", str(VALUES / "gpu-worker.yaml")]
    done = helm(*args, *[a for pair in previous for a in ("--set", pair)], check=False)
    assert done.returncode != 0
    assert f"these values carry the defaults of {named}" in done.stderr, done.stderr
    assert "--reset-then-reuse-values" in done.stderr
