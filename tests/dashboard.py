"""The metric names the Grafana dashboard (deploy/grafana/llm-gateway.json) queries, for the tests that check them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "llm-gateway.json"
_METRIC = re.compile(r"\b[a-z_]+:[a-z_]+\b")
_SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def queried_metrics(prefixes: tuple[str, ...]) -> set[str]:
    """Metric families (suffixes stripped) the dashboard's queries and variables name, among `prefixes`."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return {_family(name) for e in exprs for name in _METRIC.findall(e) if name.startswith(prefixes)}


def exposed_families(metrics_text: str) -> set[str]:
    """The metric families a /metrics body declares (with or without samples yet)."""
    return {_family(f.name) for f in text_string_to_metric_families(metrics_text)}


def _family(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
