"""What the chart hands the programs: the gateway's command line parsed by its own parser, the rendered config
loaded by its own loader, the worker's command line by the worker's parser; and the chart's docs and pins."""

from __future__ import annotations

import argparse
import json
import os
import re
import tomllib
from pathlib import Path
from unittest import mock

import pytest
import yaml

from gateway.cli import _PER_MODEL_FLAGS, _check_exposure, _check_workers, build_parser
from gateway.process.config import BackendConfig, GatewayConfig, load_config
from gateway.process.limits import ServerLimits
from gateway.process.policy_gate import backend_slots
from tests.dashboard import DASHBOARD
from tests.helm.chart import (
    CHART,
    ROOT,
    VALID,
    find,
    gateway_config,
    gateway_container,
    pod_templates,
    render,
    render_text,
)


def _serve_flags() -> set[str]:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {flag for action in commands.choices["serve"]._actions for flag in action.option_strings}


KNOWN = _serve_flags()


FROM_SECRETS = {"LLM_GATEWAY_REDIS_URL": "redis://redis.test:6379/0", "LLM_GATEWAY_REDIS_PASSWORD": "from a Secret"}


def _environment(container: dict) -> dict[str, str]:
    """The container's environment as the kubelet gives it, with stand-ins for the values read from Secrets."""
    return {e["name"]: e["value"] if "value" in e else FROM_SECRETS.get(e["name"], "?") for e in container["env"]}


def _command_line(values: str) -> list[str]:
    container = gateway_container(render(values))
    assert container["command"] == ["gateway"]
    env = _environment(container)
    # Kubernetes expands $(VAR) from the container's environment
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg) for arg in container["args"]]


def _serve(values: str) -> argparse.Namespace:
    """`gateway serve`'s view of the rendered pod: its arguments parsed in its environment."""
    with mock.patch.dict(os.environ, _environment(gateway_container(render(values)))):
        return build_parser().parse_args(_command_line(values))


@pytest.mark.parametrize("values", VALID)
def test_every_chart_flag_is_known(values: str):
    flags = {arg.split("=")[0] for arg in _command_line(values) if arg.startswith("--")}
    unknown = sorted(flags - KNOWN)
    assert not unknown, f"{values}: `gateway serve` does not know {unknown} (build_parser() in gateway/cli.py)"


def test_the_schema_refuses_exactly_the_flags_serve_does_not_take_with_a_config():
    """gateway.extraArgs items that look like flags must be `gateway serve` flags, spelt out: argparse would take an
    abbreviation (`--drain-t`) as the flag the chart already passes, and exits 2 on an unknown one (a crash loop);
    and not one describing the model served without --config (`--request-timeout`), which the gateway refuses
    beside the --config the chart passes (another crash loop)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    pattern = schema["properties"]["gateway"]["properties"]["extraArgs"]["items"]["pattern"]
    listed = {f"--{flag}" for flag in re.search(r"\^--\(([^)]*)\)", pattern).group(1).split("|")}
    per_model = {flag for flag, _ in _PER_MODEL_FLAGS.values()}
    assert per_model and listed == KNOWN - {"-h", "--help"} - per_model


def test_backend_settings_are_the_configs_backend_keys():
    """backend.settings goes into the config as it is, and the gateway refuses an unknown key at start (a crash
    loop): the schema lists the config's keys, less those the chart writes from its own values."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    model = schema["properties"]["models"]["items"]["properties"]
    settings = model["backend"]["properties"]["settings"]
    assert settings["additionalProperties"] is False
    assert set(settings["properties"]) == set(BackendConfig.__dataclass_fields__) - {"type", "url", "urls", "dns"}


def test_the_schema_lists_the_registered_families():
    """The gateway refuses an unknown family at start (a crash loop): the schema refuses it at install."""
    from gateway.families import families

    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["models"]["items"]["properties"]["family"]["enum"] == sorted(families())


@pytest.mark.parametrize("values", VALID)
def test_gateway_parses_the_rendered_command_line(values: str):
    parsed = _serve(values)
    assert parsed.command == "serve" and parsed.host == "0.0.0.0"
    assert parsed.config == Path("/etc/llm-gateway/config/gateway.yaml")
    redis = (yaml.safe_load((ROOT / "tests/helm/values" / values).read_text()) or {}).get("redis", {})
    assert (parsed.redis is not None) == any(redis.get(k) for k in ("enabled", "url", "existingSecret"))


@pytest.mark.parametrize("values", VALID)
def test_gateway_accepts_the_rendered_command_line(values: str, tmp_path: Path):
    """What `gateway serve` checks before it loads anything (flags that need one another, the process group's need
    for Redis) passes: a refusal there is a crash loop. The policy directory is the volume the chart mounts."""
    parsed = _serve(values)
    if parsed.policies is not None:
        parsed.policies = tmp_path
    _check_exposure(parsed)
    _check_workers(GatewayConfig(models=[], server=ServerLimits(workers=parsed.workers or 1)), parsed)


@pytest.mark.parametrize("values", VALID)
def test_no_secret_reaches_the_command_line(values: str):
    """Whatever comes from a Secret (a Redis URL with its password, the password) stays in the environment: the
    kubelet expands $(VAR) into argv, which every process of the node reads in /proc/PID/cmdline; no URL with
    credentials sits in a plain variable, an argument or a ConfigMap."""
    for _, template in pod_templates(render(values)):
        for container in template["spec"]["containers"]:
            secret = {e["name"] for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}
            referenced = {m for arg in container.get("args", []) for m in re.findall(r"\$\((\w+)\)", arg)}
            if container["name"] == "redis":  # Redis overwrites its argv with its process title at start
                secret -= {"REDIS_PASSWORD"}
            assert not referenced & secret, f"{values}: {container['name']} passes {referenced & secret} in argv"
            plain = [e["value"] for e in container.get("env", []) if "value" in e]
            assert not [v for v in plain + container.get("args", []) if CREDENTIALS_IN_URL.search(v)], values
    for doc in find(render(values), "ConfigMap"):  # readable by more roles than Secrets are
        assert not CREDENTIALS_IN_URL.search(json.dumps(doc["data"])), f"{values}: {doc['metadata']['name']}"


CREDENTIALS_IN_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s\"]*@")
"""A URL that carries a user or a password."""


@pytest.mark.parametrize("values", VALID)
def test_gateway_loads_the_rendered_config(values: str, tmp_path: Path):
    """Checkpoint paths on the model volume are recreated under tmp_path; everything else loads as rendered."""
    text = gateway_config(render(values)).replace("/models/", f"{tmp_path}/models/")
    for model in yaml.safe_load(text)["models"]:
        checkpoint = model.get("checkpoint", "")
        if checkpoint.startswith(str(tmp_path)):
            Path(checkpoint).mkdir(parents=True, exist_ok=True)  # models may share one
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    config = load_config(path)
    values_models = (yaml.safe_load((ROOT / "tests/helm/values" / values).read_text()) or {}).get("models")
    assert [m.id for m in config.models] == [m["id"] for m in values_models or [{"id": "smollm2-135m-instruct"}]]
    for entry, model in zip(config.models, values_models or [{}], strict=True):
        assert entry.backend.request_timeout_s == 600
        if model.get("maxRunning"):  # the slots of the model's fair queue (tenants share them fairly)
            assert backend_slots(entry) == model["maxRunning"]
    config.server.workers = _serve(values).workers or 1
    _check_workers(config, _serve(values))  # each of the pod's processes gets one slot of each model at least


@pytest.mark.parametrize("values", [v for v in VALID if "type: worker" in (ROOT / "tests/helm/values" / v).read_text()])
def test_worker_accepts_the_rendered_command_line(values: str):
    """The worker's parser takes the rendered arguments, and its checks before loading anything pass (a refusal
    there is a crash loop): CUDA visible exactly when the pod has a GPU."""
    import torch

    from backends.worker.__main__ import parse_args, refuse_unsupported_dtype

    for deployment in find(render(values), "Deployment"):
        if deployment["metadata"]["labels"]["app.kubernetes.io/component"] != "worker":
            continue
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == ["python", "-m", "backends.worker"]
        gpus = int(container["resources"].get("limits", {}).get("nvidia.com/gpu", 0))
        with mock.patch.object(torch.cuda, "is_available", return_value=gpus > 0):
            args = parse_args(container["args"])
            refuse_unsupported_dtype(args)
        assert args.host == "0.0.0.0" and args.port == container["ports"][0]["containerPort"]


def test_worker_xgrammar_matches_the_pinned_one():
    """The gateway compiles grammars for the xgrammar of the worker image, which pyproject.toml pins."""
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = next(d.split("==")[1] for d in pins if d.startswith("xgrammar=="))
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert re.search(r'define "llm-gateway.workerXgrammar" -}}([\d.]+){{', helpers).group(1) == pinned
    assert f"xgrammar: {pinned}" in render_text("gpu-worker.yaml")


OPAQUE = {"models", "resources", "dns", "startup", "liveness", "readiness"}
"""Values the README describes as one mapping (Kubernetes objects, probe settings) rather than key by key."""


def _leaf_paths(node: object, prefix: str = "") -> list[str]:
    if isinstance(node, dict) and node and prefix.rpartition(".")[2] not in OPAQUE:
        return [p for key, value in node.items() for p in _leaf_paths(value, f"{prefix}.{key}" if prefix else key)]
    return [prefix]


def test_chart_readme_lists_every_value():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    missing = [path for path in _leaf_paths(values) if f"`{path}`" not in readme]
    assert not missing, f"helm/llm-gateway/README.md does not list {missing}"
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(values) <= set(schema["properties"]) and schema["additionalProperties"] is False


def test_the_chart_provisions_the_dashboard_whose_metrics_are_checked():
    """The chart's dashboard is a copy of deploy/grafana's (a chart carries no file outside it), whose every queried
    metric the gateway's and the worker's tests find exposed; a chart-only twin had drifted: no gateway panel, and a
    panel on a metric no worker serves."""
    shipped = sorted((CHART / "dashboards").glob("*.json"))
    assert [p.read_text() for p in shipped] == [DASHBOARD.read_text()]


def test_own_dashboard_is_complete():
    for path in (CHART / "dashboards").glob("*.json"):
        dashboard = json.loads(path.read_text())
        assert dashboard["title"] and dashboard["uid"]
        queried = [p for p in dashboard["panels"] if p.get("targets")]  # rows and text panels query nothing
        assert queried, f"{path.name} queries nothing"
        for panel in queried:
            assert all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        assert not re.search(r"TODO|FIXME|lorem ipsum", path.read_text(), re.IGNORECASE)
    maps = [d for d in render("servicemonitor.yaml") if d["metadata"].get("labels", {}).get("grafana_dashboard")]
    assert {name for m in maps for name in m["data"]} == {p.name for p in (CHART / "dashboards").glob("*.json")}


def test_server_limits_reach_the_command_line():
    parsed = _serve("networkpolicy-on.yaml")
    assert (parsed.max_body_bytes, parsed.max_concurrency, parsed.header_timeout, parsed.send_timeout) == (
        4194304,
        256,
        10,
        30,
    )
    assert parsed.grammar_compile_budget == 1.5 and parsed.body_min_rate == 32768
    assert _serve("defaults.yaml").grammar_compile_budget is None


def test_the_redis_timeout_reaches_the_command_line():
    assert _serve("redis-external.yaml").redis_timeout == 2.5
    assert _serve("redis-inchart.yaml").redis_timeout is None


def test_the_service_monitor_sends_the_metrics_tenants_key():
    monitor = next(d for d in render("servicemonitor-policies.yaml") if d["kind"] == "ServiceMonitor")
    authorization = {"type": "Bearer", "credentials": {"name": "prometheus-gateway-key", "key": "key"}}
    assert [e["authorization"] for e in monitor["spec"]["endpoints"]] == [authorization]
