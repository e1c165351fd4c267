"""A Kubernetes API server just real enough for `helm template --dry-run=server`: discovery of the kinds the chart
renders, and GET of the objects a test puts in it (what the chart's `lookup` reads); everything else is 404."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

KINDS = {
    "v1": {"Secret": "secrets", "ConfigMap": "configmaps", "Service": "services", "ServiceAccount": "serviceaccounts"},
    "apps/v1": {"Deployment": "deployments", "StatefulSet": "statefulsets"},
    "policy/v1": {"PodDisruptionBudget": "poddisruptionbudgets"},
    "networking.k8s.io/v1": {"NetworkPolicy": "networkpolicies", "Ingress": "ingresses"},
    "autoscaling/v2": {"HorizontalPodAutoscaler": "horizontalpodautoscalers"},
    "monitoring.coreos.com/v1": {"ServiceMonitor": "servicemonitors"},
    "gateway.networking.k8s.io/v1": {"HTTPRoute": "httproutes"},
}


def _discovery(path: str) -> dict | None:
    if path == "/version":
        return {"major": "1", "minor": "35", "gitVersion": "v1.35.0", "platform": "linux/amd64"}
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if path == "/apis":
        groups = [gv.split("/") for gv in KINDS if "/" in gv]
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                    "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v},
                }
                for g, v in groups
            ],
        }
    group_version = path.removeprefix("/api/").removeprefix("/apis/")
    if group_version in KINDS and path in (f"/api/{group_version}", f"/apis/{group_version}"):
        resources = [
            {"name": plural, "singularName": kind.lower(), "namespaced": True, "kind": kind, "verbs": ["get", "list"]}
            for kind, plural in KINDS[group_version].items()
        ]
        return {"kind": "APIResourceList", "groupVersion": group_version, "resources": resources}
    return None


@contextmanager
def fake_apiserver(objects: list[dict], directory: Path) -> Iterator[Path]:
    """Serves `objects` (namespaced) on 127.0.0.1; yields a kubeconfig file pointing at it."""
    by_path = {}
    for obj in objects:
        group_version, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
        prefix = "/api" if "/" not in group_version else "/apis"
        by_path[
            f"{prefix}/{group_version}/namespaces/{meta['namespace']}/{KINDS[group_version][kind]}/{meta['name']}"
        ] = obj

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            body = _discovery(path) or by_path.get(path)
            status = 200 if body else 404
            if body is None:
                body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = directory / "kubeconfig"
    cluster = {"name": "fake", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "fake", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    try:
        yield kubeconfig
    finally:
        server.shutdown()
        server.server_close()
