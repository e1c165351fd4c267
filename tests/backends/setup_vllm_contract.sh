#!/usr/bin/env bash
# Put vLLM 0.33.0's Python sources, and the pure packages its protocol modules import, in one folder
# (about 130 MB) for tests/backends/test_vllm_contract.py. Nothing is installed into the project's venv:
# the tests load this folder in a separate process. Prints the folder to export as VLLM_CONTRACT_DIR.
set -euo pipefail
DIR="${VLLM_CONTRACT_DIR:-$HOME/.cache/llm-gateway/vllm-0.33.0}"
PY="${PYTHON:-python}"
STAMP="$(sha256sum "$0" | cut -d' ' -f1)"
if [ "$(cat "$DIR/.complete" 2>/dev/null)" = "$STAMP" ]; then echo "$DIR"; exit 0; fi
mkdir -p "$DIR/wheel"
"$PY" -m pip download --quiet --no-deps --dest "$DIR/wheel" vllm==0.33.0
"$PY" - "$DIR" <<'PYEOF'
import pathlib, sys, zipfile
root = pathlib.Path(sys.argv[1])
wheel = next((root / "wheel").glob("vllm-0.33.0-*.whl"))
with zipfile.ZipFile(wheel) as z:
    z.extractall(root / "src", [n for n in z.namelist() if n.startswith("vllm/") and n.endswith(".py")])
PYEOF
"$PY" -m pip install --quiet --no-deps --upgrade --target "$DIR/deps" \
    aiohappyeyeballs aiohttp aiosignal cachetools cbor2 cloudpickle fastapi frozenlist multidict openai-harmony \
    opentelemetry-api opentelemetry-sdk opentelemetry-semantic-conventions pillow prometheus-client propcache \
    py-cpuinfo pybase64 pyzmq uvloop yarl partial-json-parser llguidance psutil
echo "$STAMP" > "$DIR/.complete"
echo "$DIR"
